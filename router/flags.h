// The router's own flags (docs/architecture.md, flags), declared once with their ranges, defaults
// and help, and read into the options of the router's parts; the server kit adds the flags every
// server takes (server/flags.h).
#pragma once

#include <string>
#include <vector>

#include "router/core.h"
#include "router/discovery.h"
#include "router/workers.h"
#include "server/flags.h"

namespace yoco {

FlagTable router_flags();

struct RouterFlags {
  std::string model_dir;        // the tokenizer's directory
  std::vector<Target> prefill;  // empty: colocated (decode workers prefill)
  std::vector<Target> decode;
  RouterLimits limits;
  WorkerGroupOptions workers;     // polling, DNS refresh, TLS to the workers
  std::string api_keys;           // the --api-keys file; empty: open (docs/design.md §9b)
  int http_port = -1;             // the OpenAI API's port; -1: none
  std::string chat_template;      // a file overriding the model's template
  std::string tool_call_parser;   // "auto" (from the template) or a syntax's name (router/tool_calls.h)
  std::string served_model_name;  // what clients put in "model"
};

// Reads router_flags() (declared in `f`); errors go into `f`, naming the flag.
RouterFlags read_router_flags(ServerFlags& f);

}  // namespace yoco
