// Command-line flags, each declared once (docs/architecture.md, flags): its name, type, range,
// default and help text in one FlagSpec; the parser (CLI11, in flags.cc), `--help`, the JSON
// `--config` file and the readers all follow that one declaration.
//
//   Flags f(program, about, {flag::integer("max-running", "sequences decoded at once", 32, 1, 1 << 16),
//                            flag::boolean("cuda-graphs", "capture decode steps as CUDA graphs")});
//   if (Status st = f.parse(argc, argv, 1); !st.ok()) ...;
//   const int64_t n = f.integer("max-running");  // checked against its range by parse()
#pragma once

#include <cstdint>
#include <limits>
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

enum class FlagType {
  kString,
  kInt,       // in [int_lo, int_hi]
  kDouble,    // in [lo, hi]
  kBool,      // bare --name (or --name=true|false); takes no value
  kIntList,   // comma-separated integers, each in [int_lo, int_hi]
  kRepeated,  // a string that may be given several times; every value is kept, in order
};

struct FlagSpec {
  std::string name;  // without "--"
  FlagType type = FlagType::kString;
  std::string help;
  std::string def;  // the default as it would be written on the command line; "" with no default
  int64_t int_lo = std::numeric_limits<int64_t>::min(), int_hi = std::numeric_limits<int64_t>::max();
  double lo = -std::numeric_limits<double>::infinity(), hi = std::numeric_limits<double>::infinity();
  std::string group;  // --help's heading ("" : the program's own flags)
};
using FlagTable = std::vector<FlagSpec>;

// The declarations, one call per flag.
namespace flag {
FlagSpec str(std::string name, std::string help, std::string def = "");
FlagSpec integer(std::string name, std::string help, int64_t def, int64_t lo, int64_t hi);
// An integer with no default: has() says whether it was given.
FlagSpec optional_integer(std::string name, std::string help, int64_t lo, int64_t hi);
FlagSpec number(std::string name, std::string help, double def, double lo, double hi);
FlagSpec optional_number(std::string name, std::string help, double lo, double hi);
FlagSpec boolean(std::string name, std::string help);
// `def`: the default list as written on the command line ("1,8,32"), "" for none.
FlagSpec int_list(std::string name, std::string help, int64_t lo, int64_t hi, std::string def = "");
FlagSpec repeated(std::string name, std::string help);
// `specs` under the heading `group` in --help.
FlagTable grouped(std::string group, FlagTable specs);
}  // namespace flag

class Flags {
 public:
  // `program` names the binary in --help's usage line, `about` says what it is.
  Flags(std::string program, std::string about, FlagTable table);

  // Reads argv[first..]: `--name value`, `--name=value`, bare booleans; a flag given twice keeps
  // its last value (kRepeated: every one). When the table has "config", `--config FILE` reads a
  // JSON object of flag values ({"listen": "0.0.0.0:7000", "max-running": 64,
  // "ucx-no-peer-error-handling": true}); flags given on the command line win, and unknown keys
  // are errors naming the key. Every value given is checked against its type and range here.
  // `--help` (or -h) prints help_text() to stdout and exits 0: every flag with its type, range,
  // default and help (deployment checks read its "  --name" / "  --name (boolean)" lines).
  // Errors name the flag: "unknown flag --bogus", "--n: must be in [0, 5], got 7",
  // "--n: not an integer: x", "unexpected argument \"x\"".
  Status parse(int argc, char** argv, int first);

  // Given on the command line or in the config file.
  bool has(const std::string& name) const;
  // The value given, else the declared default. Reading a name the table does not declare is a
  // broken invariant (YOCO_CHECK): every flag is declared before it is read.
  std::string str(const std::string& name) const;
  int64_t integer(const std::string& name) const;  // 0 when absent with no default
  double number(const std::string& name) const;
  bool boolean(const std::string& name) const;
  std::vector<int64_t> int_list(const std::string& name) const;  // {} when absent
  std::vector<std::string> all(const std::string& name) const;   // kRepeated: every value
  const FlagSpec& spec(const std::string& name) const;
  bool declares(const std::string& name) const;
  const FlagTable& table() const { return table_; }

  // The --help text.
  std::string help_text() const;

 private:
  Status merge_config_file(const std::string& path);
  Status check(const FlagSpec& spec) const;

  std::string program_, about_;
  FlagTable table_;
  std::map<std::string, std::vector<std::string>> values_;
};

}  // namespace yoco
