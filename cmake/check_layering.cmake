# cmake -DROOT=<dir holding plumb/> -DLAYER=<name> "-DALLOWED=<a;b;...>" [-DSTAMP=<file>] -P check_layering.cmake
# Fails, naming each file and include line, when a file under ROOT/plumb/LAYER includes "plumb/X/..." for a layer
# X not in ALLOWED; on success touches STAMP. Run by the build before each layer compiles
# (cmake/layers.cmake) and tested by tests/layering/layering_test.cmake.
cmake_minimum_required(VERSION 3.25)
if(STAMP)
  file(REMOVE ${STAMP})  # a failed check leaves no stamp, so the next build runs it again
endif()
file(GLOB_RECURSE files ${ROOT}/plumb/${LAYER}/*.h ${ROOT}/plumb/${LAYER}/*.cpp ${ROOT}/plumb/${LAYER}/*.cu)
set(errors "")
foreach(f ${files})
  file(STRINGS ${f} lines REGEX "^[ \t]*#[ \t]*include[ \t]*[\"<]plumb/")
  foreach(line ${lines})
    string(REGEX MATCH "plumb/([A-Za-z0-9_]+)/" _ "${line}")
    set(to ${CMAKE_MATCH_1})
    if(to AND NOT to IN_LIST ALLOWED)
      file(RELATIVE_PATH rel ${ROOT} ${f})
      string(STRIP "${line}" line)
      string(APPEND errors "\n  ${rel}: ${line} (layer '${to}' is not below '${LAYER}')")
    endif()
  endforeach()
endforeach()
if(errors)
  string(REPLACE ";" ", " allowed_text "${ALLOWED}")
  message(FATAL_ERROR "layering: src/plumb/${LAYER} may include only ${allowed_text}:${errors}")
endif()
if(STAMP)
  file(TOUCH ${STAMP})
endif()
