// n choices of one prompt share its prefill (docs/design.md §3.3, n choices): the router side.
// The n Generates of a group stay n independent streams; the leader (choice 0) is reserved,
// prefilled and admitted as any request, with DecodeRequest.fork_siblings = n − 1, then publishes
// the decode worker it runs on; the followers wait for that and open their Decode there with
// local_prefill and the group, so the worker forks the leader's admitted state. A leader that
// fails before its first token publishes nothing useful (nullopt) and the followers run alone;
// after that, failures and migration are per stream as for any request.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace yoco {

class ForkGroups {
 public:
  // Every member joins before its first attempt and leaves when its call ends; a group's entry
  // lives while it has members.
  void join(const std::string& group) {
    std::lock_guard<std::mutex> lock(mu_);
    ++groups_[group].members;
  }
  void leave(const std::string& group) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = groups_.find(group);
    if (it != groups_.end() && --it->second.members <= 0) groups_.erase(it);
  }
  // The leader: the decode worker its state was admitted on, or nullopt (it failed first).
  void publish(const std::string& group, std::optional<std::string> address) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = groups_.find(group);
    if (it == groups_.end() || it->second.published) return;
    it->second.published = true;
    it->second.address = std::move(address);
    cv_.notify_all();
  }
  // A follower: waits at most `limit` for the leader's answer. False: no answer yet; true with
  // *address set (the leader's worker) or empty (it failed first, or the group is gone).
  bool wait(const std::string& group, std::chrono::milliseconds limit, std::optional<std::string>* address) {
    std::unique_lock<std::mutex> lock(mu_);
    const bool answered = cv_.wait_for(lock, limit, [&] {
      auto it = groups_.find(group);
      return it == groups_.end() || it->second.published;
    });
    auto it = groups_.find(group);
    *address = answered && it != groups_.end() ? it->second.address : std::nullopt;
    return answered;
  }

 private:
  struct Entry {
    int members = 0;
    bool published = false;
    std::optional<std::string> address;
  };
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Entry> groups_;
};

// A Generate's place in its group: gRPC metadata "yoco-fork-group: GROUP/INDEX/N" (the router's
// HTTP API sets it on the n calls of one prompt; a gRPC client may too). n ≤ 1: no group.
struct ForkMember {
  std::string group;
  int index = 0, n = 1;
};

}  // namespace yoco
