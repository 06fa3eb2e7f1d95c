// Command-line flags: `--name value`, `--name=value`, and bare boolean `--name`.
// Unknown flags and malformed values are errors that name the flag.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace yoco {

// "host:port" or "[v6 addr]:port" with port 0..65535 (0: any free port) for a listening
// socket; the error names `flag`.
Result<std::pair<std::string, int>> parse_listen_address(const std::string& value, const std::string& flag);

// A worker's --device value: "cpu" → −1, "cuda" → 0, "cuda:N" → N (EngineOptions::device).
// Errors name --device.
Result<int> parse_device_flag(const std::string& value);

class Flags {
 public:
  // `known` lists the accepted flag names (without "--"); `booleans` those that take no value.
  // When `known` has "config", `--config FILE` reads a JSON object of flag values ({"listen":
  // "0.0.0.0:7000", "max-running": 64, "ucx-no-peer-error-handling": true}); flags given on the
  // command line win, and unknown keys are errors naming the key.
  // `--help` anywhere prints every accepted flag (one per line, "--name" or "--name (boolean)")
  // to stdout and exits 0: deployment checks compare manifests against it.
  static Result<Flags> parse(int argc, char** argv, int first, const std::set<std::string>& known,
                             const std::set<std::string>& booleans = {});

  bool has(const std::string& name) const { return values_.count(name) > 0; }
  std::string get(const std::string& name, const std::string& def = "") const;
  Result<int64_t> get_int(const std::string& name, int64_t def) const;
  Result<double> get_double(const std::string& name, double def) const;
  bool get_bool(const std::string& name) const { return has(name); }
  // Comma-separated integers, e.g. --tokens 1,2,3.
  Result<std::vector<int64_t>> get_int_list(const std::string& name) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  Status merge_config_file(const std::string& path, const std::set<std::string>& known,
                           const std::set<std::string>& booleans);

  std::map<std::string, std::string> values_;
  std::vector<std::string> positional_;
};

}  // namespace yoco
