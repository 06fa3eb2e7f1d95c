#include "common/flags.h"

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <fstream>
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

Result<Flags> Flags::parse(int argc, char** argv, int first, const std::set<std::string>& known,
                           const std::set<std::string>& booleans) {
  Flags f;
  for (int i = first; i < argc; ++i)
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
      std::printf("usage: %s [flags]\n", argc > 0 ? argv[0] : "prog");
      for (const auto& k : known) std::printf("  --%s%s\n", k.c_str(), booleans.count(k) ? " (boolean)" : "");
      std::exit(0);
    }
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0) {
      f.positional_.push_back(a);
      continue;
    }
    std::string name = a.substr(2), value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    if (!known.count(name)) return invalid_argument("unknown flag --" + name);
    if (booleans.count(name)) {
      if (has_value && value != "true" && value != "1") {
        if (value == "false" || value == "0") continue;
        return invalid_argument("--" + name + ": expected true or false");
      }
      f.values_[name] = "true";
      continue;
    }
    if (!has_value) {
      if (i + 1 >= argc) return invalid_argument("--" + name + ": missing value");
      value = argv[++i];
    }
    f.values_[name] = value;
  }
  if (known.count("config") && f.has("config"))
    YOCO_RETURN_IF_ERROR(f.merge_config_file(f.get("config"), known, booleans));
  return f;
}

Status Flags::merge_config_file(const std::string& path, const std::set<std::string>& known,
                                const std::set<std::string>& booleans) {
  std::ifstream in(path);
  if (!in) return invalid_argument("--config: cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  auto j = Json::parse(ss.str());
  if (!j.ok()) return invalid_argument("--config " + path + ": " + j.status().message());
  if (!j->is_object()) return invalid_argument("--config " + path + ": expected a JSON object of flag values");
  for (const auto& [key, v] : j->as_object()) {
    if (key == "config" || !known.count(key))
      return invalid_argument("--config " + path + ": unknown key \"" + key + "\"");
    if (values_.count(key)) continue;  // the command line wins
    if (booleans.count(key)) {
      if (!v.is_bool()) return invalid_argument("--config " + path + ": \"" + key + "\" must be true or false");
      if (v.as_bool()) values_[key] = "true";
    } else if (v.is_string()) {
      values_[key] = v.as_string();
    } else if (v.is_integer()) {
      values_[key] = std::to_string(v.as_int());
    } else if (v.is_number()) {
      std::ostringstream os;
      os.precision(17);
      os << v.as_double();
      values_[key] = os.str();
    } else {
      return invalid_argument("--config " + path + ": \"" + key + "\" must be a string or a number");
    }
  }
  return Status::Ok();
}

std::string Flags::get(const std::string& name, const std::string& def) const {
  auto it = values_.find(name);
  return it == values_.end() ? def : it->second;
}

Result<int64_t> Flags::get_int(const std::string& name, int64_t def) const {
  auto it = values_.find(name);
  if (it == values_.end()) return def;
  int64_t v = 0;
  const std::string& s = it->second;
  auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (r.ec != std::errc() || r.ptr != s.data() + s.size())
    return invalid_argument("--" + name + ": not an integer: " + s);
  return v;
}

Result<double> Flags::get_double(const std::string& name, double def) const {
  auto it = values_.find(name);
  if (it == values_.end()) return def;
  const std::string& s = it->second;
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || errno == ERANGE) return invalid_argument("--" + name + ": not a number: " + s);
  return v;
}

Result<std::vector<int64_t>> Flags::get_int_list(const std::string& name) const {
  std::vector<int64_t> out;
  const std::string s = get(name);
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
      return invalid_argument("--" + name + ": item " + std::to_string(out.size()) + " (\"" + item +
                              "\") is not an integer");
    out.push_back(v);
    pos = end + 1;
  }
  return out;
}

}  // namespace yoco
