// SPDX-License-Identifier: Apache-2.0
// nccl::Transport over one GPU: a one-rank communicator sending to itself (grouped and
// not), split, the unique-id file bootstrap, and a receive nobody sends turning into a
// timeout and an abort instead of a hang. Host code; exit 77 without a device.
#include <disagmoe/backend/cuda/memory.hpp>
#include <disagmoe/backend/nccl/transport.hpp>
#include <disagmoe/comm/laned_transport.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

using namespace disagmoe;
using namespace std::chrono_literals;

namespace {

nccl::Transport one_rank() {
  ncclUniqueId id{};
  DISAGMOE_NCCL_CHECK(ncclGetUniqueId(&id));
  nccl::Options o;
  o.timeout = 30s;
  o.name = "test";
  return nccl::Transport::create(id, 0, 1, o);
}

/// Sends `n` bytes to itself through `t` in one group (a rank's send to itself and its
/// receive must share a group: separate groups run one after the other on one stream).
void self_exchange(nccl::Transport& t, std::size_t n) {
  std::vector<unsigned char> pattern(n);
  for (std::size_t i = 0; i < n; ++i) pattern[i] = static_cast<unsigned char>(i * 131 + 7);
  cuda::DeviceBuffer<unsigned char> sbuf, rbuf;
  sbuf.assign(pattern);
  rbuf.assign(std::vector<unsigned char>(n));
  nccl::Transport::Request s, r;
  {
    comm::GroupGuard<nccl::Transport> g(t);
    r = comm::irecv(t, 0, 3, std::span<unsigned char>(rbuf.data(), n));
    s = comm::isend(t, 0, 3, std::span<const unsigned char>(sbuf.data(), n));
  }
  const auto deadline = comm::deadline_after(30s);
  CHECK(t.wait(s, deadline));
  CHECK(t.wait(r, deadline));
  std::vector<unsigned char> got(n);
  DISAGMOE_CUDA_CHECK(cudaMemcpy(got.data(), rbuf.data(), n, cudaMemcpyDeviceToHost));
  CHECK(got == pattern);
}

}  // namespace

TEST_CASE("a one-rank communicator sends to itself, step after step") {
  auto t = one_rank();
  CHECK(t.rank() == 0);
  CHECK(t.size() == 1);
  self_exchange(t, 1 << 20);
  self_exchange(t, 4097);
  self_exchange(t, 1);
}

TEST_CASE("host memory is staged through the device, both ways and mixed") {
  auto t = one_rank();
  for (std::size_t n : {std::size_t{1}, std::size_t{16}, std::size_t{100000}}) {
    INFO("bytes = " << n);
    std::vector<std::byte> src(n), dst(n), dst2(n);
    for (std::size_t i = 0; i < n; ++i) src[i] = static_cast<std::byte>(i * 7 + 1);
    cuda::DeviceBuffer<std::byte> dev;
    dev.resize(n);
    nccl::Transport::Request a, b, c, d;
    {
      comm::GroupGuard<nccl::Transport> g(t);
      a = t.isend(0, 1, std::span<const std::byte>(src));  // host -> host
      b = t.irecv(0, 1, std::span<std::byte>(dst));
      c = t.isend(0, 2, std::span<const std::byte>(src));  // host -> device
      d = t.irecv(0, 2, std::span<std::byte>(dev.data(), n));
    }
    const auto deadline = comm::deadline_after(30s);
    CHECK(t.wait(b, deadline));  // any request of the group delivers its host receives
    CHECK(dst == src);
    for (auto* r : {&a, &c, &d}) CHECK(t.wait(*r, deadline));
    DISAGMOE_CUDA_CHECK(cudaMemcpy(dst2.data(), dev.data(), n, cudaMemcpyDeviceToHost));
    CHECK(dst2 == src);
  }
}

TEST_CASE("split gives the members a communicator, the others nothing") {
  auto t = one_rank();
  const int all[] = {0};
  auto sub = t.split(all);
  REQUIRE(sub.has_value());
  CHECK(sub->rank() == 0);
  CHECK(sub->size() == 1);
  self_exchange(*sub, 1000);
  CHECK_FALSE(t.split(std::span<const int>{}).has_value());
  const int bad[] = {1};
  CHECK_THROWS_AS(t.split(bad), ConfigError);
}

TEST_CASE("the unique id travels through a file") {
  const auto path = (std::filesystem::temp_directory_path() / ("disagmoe_nccl_id_" + std::to_string(::getpid()))).string();
  std::filesystem::remove(path);
  const auto written = nccl::unique_id_from_file(path, 0);
  const auto read = nccl::unique_id_from_file(path, 1, 5s);
  CHECK(std::memcmp(written.internal, read.internal, sizeof(written.internal)) == 0);
  std::filesystem::remove(path);
  CHECK_THROWS_AS(nccl::unique_id_from_file(path, 1, 50ms), TimeoutError);
}

/// Two channels' messages to itself (tags 0 and kTagsPerChannel, distinct bytes), the
/// sends posted channel 0 first and the receives channel 1 first, in one group of `t`;
/// returns what each receive got.
template <class T>
std::vector<std::vector<unsigned char>> crossed_self_exchange(T& t, std::size_t n) {
  std::vector<unsigned char> pattern[2];
  cuda::DeviceBuffer<std::byte> sbuf[2], rbuf[2];
  for (int c = 0; c < 2; ++c) {
    pattern[c].assign(n, static_cast<unsigned char>(0x10 + c));
    sbuf[c].assign(std::as_bytes(std::span(pattern[c])));
    rbuf[c].assign(std::vector<std::byte>(n));
  }
  typename T::Request req[4];
  {
    comm::GroupGuard<T> g(t);
    req[0] = t.isend(0, 0, std::span<const std::byte>(sbuf[0].data(), n));
    req[1] = t.isend(0, comm::kTagsPerChannel, std::span<const std::byte>(sbuf[1].data(), n));
    req[2] = t.irecv(0, comm::kTagsPerChannel, std::span<std::byte>(rbuf[1].data(), n));
    req[3] = t.irecv(0, 0, std::span<std::byte>(rbuf[0].data(), n));
  }
  const auto deadline = comm::deadline_after(30s);
  for (auto& r : req) CHECK(t.wait(r, deadline));
  std::vector<std::vector<unsigned char>> got(2, std::vector<unsigned char>(n));
  for (int c = 0; c < 2; ++c) DISAGMOE_CUDA_CHECK(cudaMemcpy(got[c].data(), rbuf[c].data(), n, cudaMemcpyDeviceToHost));
  return got;
}

TEST_CASE("channels posted in different orders cross on one communicator and not on lanes") {
  const std::size_t n = 4096;
  auto t = one_rank();
  const auto crossed = crossed_self_exchange(t, n);  // NCCL matched by issue order, not tag
  CHECK(crossed[1] == std::vector<unsigned char>(n, 0x10));
  CHECK(crossed[0] == std::vector<unsigned char>(n, 0x11));
  comm::LanedTransport<nccl::Transport> laned(one_rank(), 2);  // one group over two communicators
  const auto got = crossed_self_exchange(laned, n);
  CHECK(got[0] == std::vector<unsigned char>(n, 0x10));
  CHECK(got[1] == std::vector<unsigned char>(n, 0x11));
}

// Last: it aborts a communicator with a kernel waiting on the device.
TEST_CASE("a receive nobody sends is a timeout, and cancelling it aborts instead of hanging") {
  auto t = one_rank();
  cuda::DeviceBuffer<std::byte> rbuf;
  rbuf.resize(64);
  nccl::Transport::Request r;
  bool timed_out = false, reported = false;
  try {
    r = t.irecv(0, 9, std::span<std::byte>(rbuf.data(), 64));
    timed_out = !t.wait(r, comm::deadline_after(300ms));
  } catch (const NcclError& e) {  // NCCL refused the lone receive itself: also no hang
    reported = std::string(e.what()).find("expected ncclSuccess") != std::string::npos;
  }
  CHECK((timed_out || reported));
  if (timed_out) {
    t.cancel(r);
    CHECK(t.aborted());
    std::vector<std::byte> none;
    CHECK_THROWS_WITH_AS(t.isend(0, 1, none), doctest::Contains("aborted"), NcclError);
  }
}
