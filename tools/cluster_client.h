// yoco-cli's cluster mode: the subcommands that talk to a running cluster (the router, or any
// server of the public yoco.v1 API) instead of loading the model in-process. Each command is a
// file of tools/client/ (bench: bench/load_generator.cc).
#pragma once

#include <string>

namespace yoco::cli {

// Runs generate, score, tokenize, detokenize, info or bench against --router and returns the
// process exit code: 0 on success, 1 on an RPC error (`error: CODE: message` on stderr), 2 on a
// bad flag (`error: INVALID_ARGUMENT: ...`).
int run_cluster_command(const std::string& cmd, int argc, char** argv);

void cluster_usage();

}  // namespace yoco::cli
