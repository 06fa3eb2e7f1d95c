// yoco-cli info --router: the served model (GetModelInfo), as JSON.
#include <iostream>

#include "common/json.h"
#include "tools/client/commands.h"
#include "tools/client/connection.h"

namespace yoco::cli {

int cmd_info(int argc, char** argv) {
  ServerFlags f = command_flags(argc, argv, "the served model (GetModelInfo), as JSON",
                                {flag::boolean("json", "accepted for symmetry: the output is JSON either way")});
  auto conn = connect(f);
  if (!f.ok()) return flag_fail(f);
  grpc::ClientContext ctx;
  conn->prepare(ctx);
  v1::ModelInfo info;
  if (grpc::Status st = conn->stub->GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info); !st.ok()) return rpc_fail(st);
  Json::Object o;
  o["name"] = Json(info.name());
  o["fingerprint"] = Json(info.fingerprint());
  o["arch"] = Json(info.arch());
  o["vocab_size"] = Json(info.vocab_size());
  o["max_seq_len"] = Json(info.max_seq_len());
  o["n_layers"] = Json(info.n_layers());
  o["n_self_layers"] = Json(info.n_self_layers());
  o["n_loops"] = Json(info.n_loops());
  o["sliding_window"] = Json(info.sliding_window());
  o["kv_bytes_per_token"] = Json(info.kv_bytes_per_token());
  if (info.has_bos_id()) o["bos_id"] = Json(info.bos_id());
  if (info.has_eos_id()) o["eos_id"] = Json(info.eos_id());
  auto config = Json::parse(info.params_json());
  o["config"] = config.ok() ? config.value() : Json(info.params_json());
  std::cout << Json(std::move(o)).dump() << "\n";
  return 0;
}

}  // namespace yoco::cli
