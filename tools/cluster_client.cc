// yoco-cli's cluster mode over the public yoco.v1 API (docs/design.md §3.2): the table from a
// command's name to its file (tools/client/commands.h; bench in bench/load_generator.cc).
#include "tools/cluster_client.h"

#include <cstdio>
#include <map>

#include "tools/client/commands.h"

namespace yoco::cli {

int run_cluster_command(const std::string& cmd, int argc, char** argv) {
  static const std::map<std::string, int (*)(int, char**)> commands = {{"generate", cmd_generate},
                                                                       {"score", cmd_score},
                                                                       {"tokenize", cmd_tokenize},
                                                                       {"detokenize", cmd_detokenize},
                                                                       {"info", cmd_info},
                                                                       {"cache-doc", cmd_cache_doc},
                                                                       {"get-doc", cmd_get_doc},
                                                                       {"list-docs", cmd_list_docs},
                                                                       {"delete-doc", cmd_delete_doc},
                                                                       {"bench", cmd_bench}};
  const auto it = commands.find(cmd);
  if (it != commands.end()) return it->second(argc, argv);
  std::fprintf(stderr, "error: INVALID_ARGUMENT: \"%s\" does not take --router\n", cmd.c_str());
  return 2;
}

void cluster_usage() {
  std::fprintf(
      stderr,
      "With --router HOST:PORT the commands talk to a cluster (yoco.v1) instead of loading a model;\n"
      "sampling flags left out take the server's defaults (temperature 1). Every one takes --deadline-ms MS,\n"
      "--api-key KEY (default $YOCO_API_KEY, sent as `authorization: Bearer KEY`) and, for a TLS router,\n"
      "--tls-ca FILE [--tls-cert FILE --tls-key FILE] (a client certificate) [--tls-server-name NAME]\n"
      "(the name its certificate must carry, when not --router's host).\n"
      "  generate --router HOST:PORT (--prompt TEXT | --tokens 1,2,3) [--max-tokens N] [--temperature T]\n"
      "           [--top-k K] [--top-p P] [--min-p P] [--repetition-penalty R] [--presence-penalty P]\n"
      "           [--frequency-penalty F] [--seed S] [--stop STR]... [--stop-token-ids 1,2] [--ignore-eos]\n"
      "           [--logprobs N] [--request-id ID] [--priority P] [--document-ids ID,ID] [--json]\n"
      "           [--json-schema SCHEMA | --json-object | --regex RE | --choice STR... | --grammar EBNF]\n"
      "  cache-doc --router HOST:PORT (--text TEXT | --file PATH | --tokens 1,2,3) [--ttl-seconds S]\n"
      "  get-doc --router HOST:PORT --id ID;  list-docs --router HOST:PORT;  delete-doc --router HOST:PORT --id ID\n"
      "  score --router HOST:PORT (--text TEXT | --tokens 1,2,3) [--top-logprobs N] [--json]\n"
      "  tokenize --router HOST:PORT --text TEXT [--add-bos] [--allow-special] [--json]\n"
      "  detokenize --router HOST:PORT --tokens 1,2,3 [--skip-special]\n"
      "  info --router HOST:PORT\n"
      "  bench --router HOST:PORT --requests N [--rate R (Poisson req/s; 0: all at once)] [--concurrency C]\n"
      "        [--prompt-tokens L] [--max-tokens M] [--vocab-from-router] [--vocab-size V] [--seed S] [--json]\n"
      "  bench --router HOST:PORT --trace FILE.csv (TIMESTAMP,ContextTokens,GeneratedTokens[,DocumentId,\n"
      "        DocumentTokens]: tools/planner/README.md) [--concurrency C] [--seed S] [--json]\n"
      "An RPC error prints `error: CODE: message` and exits 1; a bad flag exits 2.\n");
}

}  // namespace yoco::cli
