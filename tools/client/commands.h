// yoco-cli's cluster commands, one file each (tools/client/*.cc; bench in bench/load_generator.cc),
// over one connection helper (connection.h). Each takes the whole argv (argv[1] is the command)
// and returns the process exit code: 0, 1 on an RPC error, 2 on a bad flag.
#pragma once

namespace yoco::cli {

int cmd_generate(int argc, char** argv);  // generate.cc: a streamed Generate
int cmd_score(int argc, char** argv);     // score.cc
int cmd_tokenize(int argc, char** argv);  // tokens.cc
int cmd_detokenize(int argc, char** argv);
int cmd_info(int argc, char** argv);       // info.cc: GetModelInfo
int cmd_cache_doc(int argc, char** argv);  // documents.cc (RAG pre-caching)
int cmd_get_doc(int argc, char** argv);
int cmd_list_docs(int argc, char** argv);
int cmd_delete_doc(int argc, char** argv);
int cmd_bench(int argc, char** argv);  // bench/load_generator.cc: the open-loop load generator

}  // namespace yoco::cli
