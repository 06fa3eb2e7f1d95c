#include "common/flags.h"

#include <CLI/CLI.hpp>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>

#include "common/json.h"

namespace yoco {

Result<int> parse_device_flag(const std::string& value) {
  if (value == "cpu") return -1;
  if (value == "cuda") return 0;
  if (value.rfind("cuda:", 0) == 0 && value.size() > 5 && value.size() <= 8 &&
      value.find_first_not_of("0123456789", 5) == std::string::npos)
    return std::stoi(value.substr(5));
  return invalid_argument("--device: must be cpu, cuda or cuda:N, got \"" + value + "\"");
}

Result<std::pair<std::string, int>> parse_listen_address(const std::string& value, const std::string& flag) {
  const auto colon = value.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == value.size())
    return invalid_argument("--" + flag + ": expected host:port, got \"" + value + "\"");
  std::string host = value.substr(0, colon);
  if (host.front() == '[') {
    if (host.back() != ']') return invalid_argument("--" + flag + ": unbalanced [ in \"" + value + "\"");
    host = host.substr(1, host.size() - 2);
  }
  const std::string port_s = value.substr(colon + 1);
  int port = -1;
  auto r = std::from_chars(port_s.data(), port_s.data() + port_s.size(), port);
  if (r.ec != std::errc() || r.ptr != port_s.data() + port_s.size() || port < 0 || port > 65535)
    return invalid_argument("--" + flag + ": bad port \"" + port_s + "\"");
  return std::make_pair(host, port);
}

namespace flag {

namespace {
FlagSpec make(std::string name, FlagType type, std::string help, std::string def = "") {
  FlagSpec s;
  s.name = std::move(name);
  s.type = type;
  s.help = std::move(help);
  s.def = std::move(def);
  return s;
}

std::string number_text(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}
}  // namespace

FlagSpec str(std::string name, std::string help, std::string def) {
  return make(std::move(name), FlagType::kString, std::move(help), std::move(def));
}

FlagSpec integer(std::string name, std::string help, int64_t def, int64_t lo, int64_t hi) {
  FlagSpec s = optional_integer(std::move(name), std::move(help), lo, hi);
  s.def = std::to_string(def);
  return s;
}

FlagSpec optional_integer(std::string name, std::string help, int64_t lo, int64_t hi) {
  FlagSpec s = make(std::move(name), FlagType::kInt, std::move(help));
  s.int_lo = lo;
  s.int_hi = hi;
  return s;
}

FlagSpec number(std::string name, std::string help, double def, double lo, double hi) {
  FlagSpec s = optional_number(std::move(name), std::move(help), lo, hi);
  s.def = number_text(def);
  return s;
}

FlagSpec optional_number(std::string name, std::string help, double lo, double hi) {
  FlagSpec s = make(std::move(name), FlagType::kDouble, std::move(help));
  s.lo = lo;
  s.hi = hi;
  return s;
}

FlagSpec boolean(std::string name, std::string help) { return make(std::move(name), FlagType::kBool, std::move(help)); }

FlagSpec int_list(std::string name, std::string help, int64_t lo, int64_t hi, std::string def) {
  FlagSpec s = make(std::move(name), FlagType::kIntList, std::move(help), std::move(def));
  s.int_lo = lo;
  s.int_hi = hi;
  return s;
}

FlagSpec repeated(std::string name, std::string help) {
  return make(std::move(name), FlagType::kRepeated, std::move(help));
}

FlagTable grouped(std::string group, FlagTable specs) {
  for (FlagSpec& s : specs) s.group = group;
  return specs;
}

}  // namespace flag

namespace {

Result<int64_t> to_int(const std::string& name, const std::string& s) {
  int64_t v = 0;
  auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || r.ec != std::errc() || r.ptr != s.data() + s.size())
    return invalid_argument("--" + name + ": not an integer: " + s);
  return v;
}

Result<double> to_double(const std::string& name, const std::string& s) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || errno == ERANGE) return invalid_argument("--" + name + ": not a number: " + s);
  return v;
}

std::string range_text(const FlagSpec& s) {
  std::ostringstream os;
  if (s.type == FlagType::kDouble) os << "[" << s.lo << ", " << s.hi << "]";
  else os << "[" << s.int_lo << ", " << s.int_hi << "]";
  return os.str();
}

Result<std::vector<int64_t>> to_int_list(const FlagSpec& spec, const std::string& s) {
  std::vector<int64_t> out;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t end = s.find(',', pos);
    if (end == std::string::npos) end = s.size();
    std::string item = s.substr(pos, end - pos);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    int64_t v = 0;
    auto r = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || r.ec != std::errc() || r.ptr != item.data() + item.size())
      return invalid_argument("--" + spec.name + ": item " + std::to_string(out.size()) + " (\"" + item +
                              "\") is not an integer");
    if (v < spec.int_lo || v > spec.int_hi)
      return invalid_argument("--" + spec.name + "[" + std::to_string(out.size()) + "]: must be in " +
                              range_text(spec) + ", got " + std::to_string(v));
    out.push_back(v);
    pos = end + 1;
  }
  return out;
}

// What --help says of a flag under its name: type, range, default, then the help text.
std::string describe(const FlagSpec& s) {
  const bool full_int =
      s.int_lo == std::numeric_limits<int64_t>::min() && s.int_hi == std::numeric_limits<int64_t>::max();
  const bool full_double = std::isinf(s.lo) && std::isinf(s.hi);
  std::string out;
  switch (s.type) {
    case FlagType::kString:
      out = "text";
      break;
    case FlagType::kInt:
      out = full_int ? "integer" : "integer in " + range_text(s);
      break;
    case FlagType::kDouble:
      out = full_double ? "number" : "number in " + range_text(s);
      break;
    case FlagType::kBool:
      out = "boolean (absent: false)";
      break;
    case FlagType::kIntList:
      out = full_int ? "comma-separated integers" : "comma-separated integers, each in " + range_text(s);
      break;
    case FlagType::kRepeated:
      out = "text, may be repeated";
      break;
  }
  if (!s.def.empty()) out += ", default " + s.def;
  return s.help.empty() ? out : out + ": " + s.help;
}

// --help as our deployment checks read it: one "  --name" (or "  --name (boolean)") line per flag,
// then its description indented under it.
class HelpFormatter : public CLI::Formatter {
 public:
  HelpFormatter(const FlagTable& table, std::string program) : table_(table), program_(std::move(program)) {}

  std::string make_usage(const CLI::App*, std::string) const override { return "usage: " + program_ + " [flags]\n"; }

  std::string make_option(const CLI::Option* opt, bool) const override {
    const std::string name = opt->get_name();  // "--name"
    for (const FlagSpec& s : table_)
      if ("--" + s.name == name)
        return "  " + name + (s.type == FlagType::kBool ? " (boolean)" : "") + "\n      " + describe(s) + "\n";
    return "  " + name + " (boolean)\n      " + opt->get_description() + "\n";  // --help
  }

 private:
  const FlagTable& table_;
  const std::string program_;
};

}  // namespace

Flags::Flags(std::string program, std::string about, FlagTable table)
    : program_(std::move(program)), about_(std::move(about)), table_(std::move(table)) {}

const FlagSpec& Flags::spec(const std::string& name) const {
  for (const FlagSpec& s : table_)
    if (s.name == name) return s;
  std::fprintf(stderr, "flag --%s is read but not declared\n", name.c_str());
  YOCO_CHECK(false);
  std::abort();
}

bool Flags::declares(const std::string& name) const {
  for (const FlagSpec& s : table_)
    if (s.name == name) return true;
  return false;
}

bool Flags::has(const std::string& name) const {
  spec(name);
  return values_.count(name) > 0;
}

std::string Flags::str(const std::string& name) const {
  const FlagSpec& s = spec(name);
  auto it = values_.find(name);
  return it == values_.end() ? s.def : it->second.back();
}

int64_t Flags::integer(const std::string& name) const {
  YOCO_CHECK(spec(name).type == FlagType::kInt);
  const std::string v = str(name);
  auto r = to_int(name, v);
  return r.ok() ? *r : 0;  // values were checked by parse()
}

double Flags::number(const std::string& name) const {
  YOCO_CHECK(spec(name).type == FlagType::kDouble);
  const std::string v = str(name);
  auto r = to_double(name, v);
  return r.ok() ? *r : 0.0;
}

bool Flags::boolean(const std::string& name) const {
  YOCO_CHECK(spec(name).type == FlagType::kBool);
  return has(name);
}

std::vector<int64_t> Flags::int_list(const std::string& name) const {
  const FlagSpec& s = spec(name);
  YOCO_CHECK(s.type == FlagType::kIntList);
  auto r = to_int_list(s, str(name));
  return r.ok() ? std::move(r).value() : std::vector<int64_t>{};
}

std::vector<std::string> Flags::all(const std::string& name) const {
  spec(name);
  auto it = values_.find(name);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

std::string Flags::help_text() const {
  CLI::App app(about_, program_);
  app.formatter(std::make_shared<HelpFormatter>(table_, program_));
  app.set_help_flag("-h,--help", "print this help and exit");
  for (const FlagSpec& s : table_) {
    CLI::Option* o = s.type == FlagType::kBool ? app.add_flag("--" + s.name, s.help) : app.add_option("--" + s.name);
    if (!s.group.empty()) o->group(s.group);
  }
  return app.help();
}

Status Flags::check(const FlagSpec& s) const {
  auto it = values_.find(s.name);
  if (it == values_.end()) return Status::Ok();
  const std::string& v = it->second.back();
  switch (s.type) {
    case FlagType::kInt: {
      auto n = to_int(s.name, v);
      if (!n.ok()) return n.status();
      if (*n < s.int_lo || *n > s.int_hi)
        return invalid_argument("--" + s.name + ": must be in " + range_text(s) + ", got " + std::to_string(*n));
      return Status::Ok();
    }
    case FlagType::kDouble: {
      auto d = to_double(s.name, v);
      if (!d.ok()) return d.status();
      if (!(*d >= s.lo && *d <= s.hi)) {
        std::ostringstream os;
        os << "--" << s.name << ": must be in " << range_text(s) << ", got " << *d;
        return invalid_argument(os.str());
      }
      return Status::Ok();
    }
    case FlagType::kIntList:
      return to_int_list(s, v).status();
    default:
      return Status::Ok();
  }
}

Status Flags::parse(int argc, char** argv, int first) {
  values_.clear();
  CLI::App app(about_, program_);
  app.formatter(std::make_shared<HelpFormatter>(table_, program_));
  app.set_help_flag("-h,--help", "print this help and exit");
  app.allow_extras();
  std::vector<std::pair<const FlagSpec*, CLI::Option*>> options;
  try {
    for (const FlagSpec& s : table_) {
      CLI::Option* o = s.type == FlagType::kBool ? app.add_flag("--" + s.name, s.help) : app.add_option("--" + s.name);
      o->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);  // the last wins (kRepeated: all), below
      options.emplace_back(&s, o);
    }
  } catch (const CLI::ConstructionError& e) {  // a name declared twice: the program's own bug
    std::fprintf(stderr, "%s: flag table: %s\n", program_.c_str(), e.what());
    YOCO_CHECK(false);
  }
  // CLI11 reads the arguments in reverse. "--name=" is an empty value, as "--name ''".
  std::vector<std::string> args;
  for (int i = argc - 1; i >= first; --i) {
    std::string a = argv[i];
    if (a.size() > 3 && a.rfind("--", 0) == 0 && a.back() == '=' && a.find('=') == a.size() - 1) {
      args.emplace_back("");
      a.pop_back();
    }
    args.push_back(std::move(a));
  }
  try {
    app.parse(std::move(args));
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    std::exit(0);
  } catch (const CLI::ParseError& e) {
    return invalid_argument(e.what());
  }
  for (const std::string& extra : app.remaining()) {
    if (extra.rfind("--", 0) == 0) return invalid_argument("unknown flag " + extra.substr(0, extra.find('=')));
    if (extra.size() > 1 && extra[0] == '-' && !to_double("", extra).ok())
      return invalid_argument("unknown flag " + extra);
    return invalid_argument("unexpected argument \"" + extra + "\"");
  }
  for (const auto& [s, o] : options) {
    if (o->count() == 0) continue;
    std::vector<std::string> given = o->results();
    if (s->type == FlagType::kBool) {
      // CLI11 turns --name=false (or 0) into "-1"/"false" and --name into "true".
      const std::string& v = given.back();
      if (v == "false" || v == "0" || v == "-1") continue;
      if (v != "true" && v != "1") return invalid_argument("--" + s->name + ": expected true or false");
      given = {"true"};
    }
    values_[s->name] = std::move(given);
  }
  for (const FlagSpec& s : table_)
    if (s.name == "config" && has("config")) {
      YOCO_RETURN_IF_ERROR(merge_config_file(str("config")));
      break;
    }
  for (const FlagSpec& s : table_) YOCO_RETURN_IF_ERROR(check(s));
  return Status::Ok();
}

Status Flags::merge_config_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return invalid_argument("--config: cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  auto j = Json::parse(ss.str());
  if (!j.ok()) return invalid_argument("--config " + path + ": " + j.status().message());
  if (!j->is_object()) return invalid_argument("--config " + path + ": expected a JSON object of flag values");
  for (const auto& [key, v] : j->as_object()) {
    const FlagSpec* s = nullptr;
    for (const FlagSpec& t : table_)
      if (t.name == key && key != "config") s = &t;
    if (s == nullptr) return invalid_argument("--config " + path + ": unknown key \"" + key + "\"");
    if (values_.count(key)) continue;  // the command line wins
    if (s->type == FlagType::kBool) {
      if (!v.is_bool()) return invalid_argument("--config " + path + ": \"" + key + "\" must be true or false");
      if (v.as_bool()) values_[key] = {"true"};
    } else if (v.is_string()) {
      values_[key] = {v.as_string()};
    } else if (v.is_integer()) {
      values_[key] = {std::to_string(v.as_int())};
    } else if (v.is_number()) {
      std::ostringstream os;
      os.precision(17);
      os << v.as_double();
      values_[key] = {os.str()};
    } else {
      return invalid_argument("--config " + path + ": \"" + key + "\" must be a string or a number");
    }
  }
  return Status::Ok();
}

}  // namespace yoco
