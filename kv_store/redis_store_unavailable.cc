// Built when hiredis is missing: the redis backend reports why it is absent.
#include "kv_store/redis_store.h"

namespace yoco {

Result<std::unique_ptr<KvStore>> make_redis_store(const RedisOptions&) {
  return kv_unimplemented("redis kv store: this build has no hiredis (install libhiredis-dev and reconfigure)");
}

}  // namespace yoco
