# ctest layering_check: cmake/check_layering.cmake accepts a downward include and refuses an
# upward one, naming the file and the layer (the build runs the same check on src/plumb).
cmake_minimum_required(VERSION 3.25)
set(root ${CMAKE_CURRENT_BINARY_DIR}/layering-fixture)
file(REMOVE_RECURSE ${root})
file(WRITE ${root}/plumb/model/forward.h "#pragma once\n#include <vector>\n#include \"plumb/backend/backend.h\"\n#include \"plumb/model/taps.h\"\n")
macro(check)
  execute_process(COMMAND ${CMAKE_COMMAND} -DROOT=${root} -DLAYER=model "-DALLOWED=model;backend;format;util"
                  -P ${SCRIPT} RESULT_VARIABLE rc ERROR_VARIABLE err)
endmacro()

check()
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "a downward include was refused:\n${err}")
endif()

file(WRITE ${root}/plumb/model/bad.cpp "#include \"plumb/model/forward.h\"\n  #  include \"plumb/verify/run.h\"\n")
check()
if(rc EQUAL 0)
  message(FATAL_ERROR "an upward include (model -> verify) was accepted")
endif()
if(NOT err MATCHES "plumb/model/bad.cpp: #  include \"plumb/verify/run.h\" \\(layer 'verify' is not below 'model'\\)")
  message(FATAL_ERROR "the refusal does not name the file and the layer:\n${err}")
endif()
if(err MATCHES "forward.h")
  message(FATAL_ERROR "the refusal also lists a file with only allowed includes:\n${err}")
endif()
message(STATUS "layering check: downward include accepted, upward include refused")
