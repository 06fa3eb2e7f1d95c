// The prefill worker's --kv-store flags: the store every prefill worker shares (docs/design.md §5).
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "kv_store/store.h"

namespace yoco {

// Opens `spec` (--kv-store). With `password_env` (--kv-store-password-env, may be empty) the Redis
// password comes from that environment variable (a Kubernetes Secret), never from a flag or a
// config file, and goes into every redis:// tier without userinfo. INVALID_ARGUMENT naming the
// flag; messages never contain the password.
Result<std::unique_ptr<KvStore>> open_kv_store(const std::string& spec, const std::string& password_env);

}  // namespace yoco
