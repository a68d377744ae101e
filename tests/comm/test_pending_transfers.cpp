// SPDX-License-Identifier: Apache-2.0
// comm::PendingTransfers against a scripted transport that counts what is still posted:
// whichever way a test or wait ends (all complete, a deadline, a transport error on any
// request), nothing the endpoint posted is left in flight to write into a released
// buffer. The oracle is an exact recount of the posted requests.
#include <disagmoe/comm/pending_transfers.hpp>

#include <doctest/doctest.h>

#include <cstddef>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

using namespace disagmoe;

namespace {

/// What a scripted request does when polled.
enum class Script {
  kCompletes,  // done on the first poll
  kNever,      // pending until cancelled
  kThrows,     // throws on the first poll and stays posted (a header that did not match)
};

/// A transport whose k-th posted request follows script[k]; `posted` holds the requests
/// neither completed nor cancelled.
struct Scripted {
  using transport_concept = comm::transport_tag;
  struct Request {
    int id = -1;
  };
  struct Shared {
    std::vector<Script> script;
    std::set<int> posted;
    int next = 0;
  };
  std::shared_ptr<Shared> s = std::make_shared<Shared>();

  int rank() const { return 0; }
  int size() const { return 2; }
  int max_tag() const { return 1 << 20; }
  Request isend(int, int, std::span<const std::byte>) { return post(); }
  Request irecv(int, int, std::span<std::byte>) { return post(); }
  void group_begin() {}
  void group_end() {}
  bool test(Request& r) { return poll(r); }
  bool wait(Request& r, comm::Deadline) { return poll(r); }
  void cancel(Request& r) {
    if (r.id < 0) return;  // empty or consumed: nothing to withdraw
    s->posted.erase(r.id);
    r = Request{};
  }
  std::optional<Scripted> split(std::span<const int>) { return std::nullopt; }

 private:
  Request post() {
    const int id = s->next++;
    s->posted.insert(id);
    return Request{id};
  }
  bool poll(Request& r) {
    REQUIRE(s->posted.count(r.id) == 1);  // never polled after completion or cancel
    switch (s->script.at(static_cast<std::size_t>(r.id))) {
      case Script::kCompletes:
        s->posted.erase(r.id);
        r = Request{};
        return true;
      case Script::kNever:
        return false;
      case Script::kThrows:
        throw std::runtime_error("request " + std::to_string(r.id) + " failed");
    }
    return false;
  }
};
static_assert(comm::transport<Scripted>);

/// Posts one request per script entry (alternating sends and receives).
void post_all(comm::PendingTransfers<Scripted>& p, const std::vector<Script>& script) {
  std::byte buf[4]{};
  for (std::size_t i = 0; i < script.size(); ++i) {
    if (i % 2 == 0)
      p.send(1, 0, std::span<std::byte>(buf), "send");
    else
      p.recv(1, 0, std::span<std::byte>(buf), "recv");
  }
}

/// Every script of length n over the three outcomes.
std::vector<std::vector<Script>> all_scripts(int n) {
  std::vector<std::vector<Script>> out{{}};
  for (int k = 0; k < n; ++k) {
    std::vector<std::vector<Script>> next;
    for (const auto& s : out)
      for (Script x : {Script::kCompletes, Script::kNever, Script::kThrows}) {
        next.push_back(s);
        next.back().push_back(x);
      }
    out = std::move(next);
  }
  return out;
}

/// Runs `body(transport, pending, script)` for every script of 1 to 4 requests, all posted.
template <class Body>
void for_every_script(Body&& body) {
  for (int n = 1; n <= 4; ++n)
    for (const auto& script : all_scripts(n)) {
      INFO("n = " << n);
      Scripted t;
      t.s->script = script;
      comm::PendingTransfers<Scripted> p(t);
      post_all(p, script);
      body(t, p, script);
    }
}

bool has(const std::vector<Script>& s, Script x) {
  for (Script y : s)
    if (y == x) return true;
  return false;
}

}  // namespace

TEST_CASE("PendingTransfers::wait leaves nothing posted: completion, deadline or a transport error") {
  for_every_script([](Scripted& t, comm::PendingTransfers<Scripted>& p, const std::vector<Script>& script) {
    bool threw = false;
    std::optional<comm::PendingTransfers<Scripted>::Label> late;
    try {
      late = p.wait(comm::Clock::now());
    } catch (const std::runtime_error&) {
      threw = true;
    }
    // Requests are waited in posting order: the first one that is not complete decides.
    std::optional<Script> first_open;
    for (Script x : script)
      if (x != Script::kCompletes) {
        first_open = x;
        break;
      }
    CHECK(threw == (first_open == Script::kThrows));
    CHECK(late.has_value() == (first_open == Script::kNever));
    CHECK(t.s->posted.empty());
    CHECK(p.empty());
  });
}

TEST_CASE("PendingTransfers::test retires what completed and cancels everything on an error") {
  for_every_script([](Scripted& t, comm::PendingTransfers<Scripted>& p, const std::vector<Script>& script) {
    bool threw = false, done = false;
    try {
      done = p.test();
    } catch (const std::runtime_error&) {
      threw = true;
    }
    CHECK(threw == has(script, Script::kThrows));
    CHECK(done == !(has(script, Script::kThrows) || has(script, Script::kNever)));
    if (threw) {
      CHECK(t.s->posted.empty());
    } else {
      std::size_t never = 0;
      for (Script x : script) never += x == Script::kNever;
      CHECK(t.s->posted.size() == never);  // still in flight, and still tracked
      p.cancel();
      CHECK(t.s->posted.empty());
    }
  });
}
