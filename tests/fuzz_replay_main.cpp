// SPDX-License-Identifier: Apache-2.0
// Deterministic stand-in for libFuzzer's driver, so fuzz targets also run under g++:
//   fuzz_X [--iterations N] [--seed S] CORPUS_DIR_OR_FILE...
// Every corpus file is run as is, then N seeded random mutations (bit flips, byte
// changes, insertions, deletions, splices of two inputs, truncations) are run. A
// target that crashes or trips a sanitizer fails the test; the seed reproduces it.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {
using Bytes = std::vector<std::uint8_t>;

Bytes read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), {});
}

void run(const Bytes& b) { LLVMFuzzerTestOneInput(b.data(), b.size()); }

Bytes mutate(Bytes b, const std::vector<Bytes>& corpus, std::mt19937_64& rng) {
  auto pick = [&](std::size_t n) { return n == 0 ? 0 : std::uniform_int_distribution<std::size_t>(0, n - 1)(rng); };
  const int rounds = 1 + static_cast<int>(pick(8));
  for (int r = 0; r < rounds; ++r) {
    switch (pick(7)) {
      case 0: if (!b.empty()) b[pick(b.size())] ^= static_cast<std::uint8_t>(1u << pick(8)); break;
      case 1: if (!b.empty()) b[pick(b.size())] = static_cast<std::uint8_t>(pick(256)); break;
      case 2: b.insert(b.begin() + static_cast<long>(pick(b.size() + 1)), static_cast<std::uint8_t>(pick(256))); break;
      case 3: if (!b.empty()) b.erase(b.begin() + static_cast<long>(pick(b.size()))); break;
      case 4: b.resize(pick(b.size() + 1)); break;
      case 5: {  // splice a slice of another input in
        const Bytes& o = corpus[pick(corpus.size())];
        if (o.empty()) break;
        const std::size_t from = pick(o.size()), len = 1 + pick(std::min<std::size_t>(64, o.size() - from));
        b.insert(b.begin() + static_cast<long>(pick(b.size() + 1)), o.begin() + static_cast<long>(from),
                 o.begin() + static_cast<long>(from + len));
        break;
      }
      default: {  // interesting values: digits, signs, separators, huge numbers
        static const char* kTokens[] = {"0", "-1", "1e308", "nan", "inf", " ", "\n", "\t", "*", "'", "99999999999999999999"};
        const std::string t = kTokens[pick(std::size(kTokens))];
        b.insert(b.begin() + static_cast<long>(pick(b.size() + 1)), t.begin(), t.end());
      }
    }
  }
  return b;
}
}  // namespace

int main(int argc, char** argv) {
  long iterations = 10000;
  std::uint64_t seed = 1;
  std::vector<Bytes> corpus;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--iterations" && i + 1 < argc) {
      iterations = std::atol(argv[++i]);
    } else if (a == "--seed" && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else if (a == "--help") {
      std::cout << "usage: " << argv[0] << " [--iterations N] [--seed S] CORPUS...\n";
      return 0;
    } else if (std::filesystem::is_directory(a)) {
      for (const auto& e : std::filesystem::directory_iterator(a))
        if (e.is_regular_file()) corpus.push_back(read_file(e.path()));
    } else {
      corpus.push_back(read_file(a));
    }
  }
  if (corpus.empty()) corpus.emplace_back();
  for (const Bytes& b : corpus) run(b);
  std::mt19937_64 rng(seed);
  for (long i = 0; i < iterations; ++i) {
    Bytes m = mutate(corpus[std::uniform_int_distribution<std::size_t>(0, corpus.size() - 1)(rng)], corpus, rng);
    run(m);
    if (i % 64 == 0 && m.size() < 4096) corpus.push_back(std::move(m));  // grow the pool a little
  }
  std::cout << "fuzz: " << iterations << " mutations, seed " << seed << ", no crash\n";
  return 0;
}
