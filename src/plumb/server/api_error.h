#pragma once
// Errors of the HTTP API in OpenAI's shape: {"error": {"message", "type", "param", "code"}}.
// An ApiError thrown anywhere while a request is handled becomes that response; a plain
// plumb::Error (bad input found below the server, e.g. by the tokenizer or the engine's
// validation) becomes a 400.
#include <string>

#include "plumb/util/error.h"

namespace plumb::server {

class ApiError : public Error {
 public:
  ApiError(int status, const std::string& message, std::string param = "", std::string code = "")
      : Error(message), status_(status), param_(std::move(param)), code_(std::move(code)) {}
  int status() const { return status_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }

 private:
  int status_;
  std::string param_, code_;
};

// "Bad Request", "Unauthorized", ... ("Unknown" for codes the server never sends).
const char* status_reason(int status);
// OpenAI's error types: invalid_request_error (400, 404, 405, 413), authentication_error (401),
// rate_limit_error (429), server_error (500), service_unavailable (503).
const char* error_type(int status);
// The JSON body; `param` and `code` are null when empty.
std::string error_body(int status, const std::string& message, const std::string& param = "", const std::string& code = "");

}  // namespace plumb::server
