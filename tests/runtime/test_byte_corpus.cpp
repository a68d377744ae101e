// SPDX-License-Identifier: Apache-2.0
// ByteCorpus and read_corpus: exact split sizes, training windows located back in the
// corpus (a de Bruijn text makes every window's position recoverable), window rules
// against a naive recount, gzip round trips and every kind of bad file, and entropy
// baselines against closed forms and a chain-rule recount.
#include <disagmoe/runtime/byte_corpus.hpp>

#include <doctest/doctest.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#if DISAGMOE_HAS_ZLIB()
#include <zlib.h>
#endif

using disagmoe::ConfigError;
using disagmoe::IoError;
using disagmoe::model::Rng;
using namespace disagmoe::runtime;
using Bytes = std::vector<std::uint8_t>;

namespace {

// A fresh folder for this process' files, removed with everything in it.
struct ScratchDir {
  std::filesystem::path dir = std::filesystem::temp_directory_path() /
                              ("disagmoe_byte_corpus_" + std::to_string(::getpid()));
  ScratchDir() { std::filesystem::create_directories(dir); }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  std::filesystem::path operator/(const std::string& name) const { return dir / name; }
};

void write_file(const std::filesystem::path& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

Bytes random_bytes(std::size_t n, std::uint64_t seed, std::uint64_t alphabet = 256) {
  Rng rng(seed);
  Bytes b(n);
  for (auto& x : b) x = static_cast<std::uint8_t>(rng.below(alphabet));
  return b;
}

// A linear de Bruijn sequence B(256, 2): every ordered byte pair occurs exactly once,
// so two adjacent bytes give their position. Built from the Lyndon words of length 1
// and 2 in lexicographic order (Fredricksen-Maiorana), plus the first byte again.
Bytes de_bruijn() {
  Bytes s;
  for (int a = 0; a < 256; ++a) {
    s.push_back(static_cast<std::uint8_t>(a));
    for (int b = a + 1; b < 256; ++b) {
      s.push_back(static_cast<std::uint8_t>(a));
      s.push_back(static_cast<std::uint8_t>(b));
    }
  }
  s.push_back(s.front());
  return s;
}

bool same(const Batch& a, const Batch& b) {
  return a.sequences == b.sequences && a.seq_len == b.seq_len && a.inputs == b.inputs &&
         a.targets == b.targets;
}

// The window rule recounted: row i is text[i*S, (i+1)*S) -> text[i*S+1, (i+1)*S+1)
// for every i with (i+1)*S+1 <= size, the first `cap` of them.
void check_windows(const Batch& b, std::span<const std::uint8_t> text, int s, int cap) {
  int expected_rows = 0;
  for (std::size_t i = 0; (i + 1) * static_cast<std::size_t>(s) + 1 <= text.size(); ++i)
    if (expected_rows < cap) ++expected_rows;
  REQUIRE(b.sequences == expected_rows);
  REQUIRE(b.seq_len == s);
  REQUIRE(b.inputs.size() == static_cast<std::size_t>(expected_rows * s));
  REQUIRE(b.targets.size() == b.inputs.size());
  for (int i = 0; i < expected_rows; ++i)
    for (int j = 0; j < s; ++j) {
      REQUIRE(b.inputs[i * s + j] == text[i * s + j]);
      REQUIRE(b.targets[i * s + j] == text[i * s + j + 1]);
    }
}

template <class E>
std::string message_of(auto&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  FAIL("expected an exception");
  return {};
}

}  // namespace

TEST_CASE("de Bruijn helper: every byte pair exactly once") {
  const Bytes s = de_bruijn();
  REQUIRE(s.size() == 65537);
  std::vector<int> seen(65536);
  for (std::size_t i = 0; i + 1 < s.size(); ++i) ++seen[s[i] * 256 + s[i + 1]];
  for (const int c : seen) REQUIRE(c == 1);
}

TEST_CASE("split sizes are exact") {
  const ByteCorpus a(Bytes(1000), 8, 0.1);
  CHECK(a.train_bytes() == 900);
  CHECK(a.validation_bytes() == 100);
  const ByteCorpus b(Bytes(1001), 8, 0.25);  // 250.25 rounds to 250
  CHECK(b.train_bytes() == 751);
  CHECK(b.validation_bytes() == 250);
  const ByteCorpus c(Bytes(10), 4, 0.5);
  CHECK(c.train_bytes() == 5);
  CHECK(c.validation_bytes() == 5);
  const ByteCorpus d(Bytes(17), 16, 0.0);  // no validation split
  CHECK(d.train_bytes() == 17);
  CHECK(d.validation_bytes() == 0);
  CHECK(d.validation().sequences == 0);
  CHECK(d.validation().inputs.empty());

  Bytes text(300);
  std::iota(text.begin(), text.end(), std::uint8_t{0});
  const ByteCorpus e(text, 8, 0.1);  // train 270, validation 30
  REQUIRE(e.train_split().size() == 270);
  REQUIRE(e.validation_split().size() == 30);
  CHECK(e.train_split()[269] == text[269]);
  CHECK(e.validation_split()[0] == text[270]);
  CHECK(e.validation_split()[29] == text[299]);
}

TEST_CASE("bad parameters and too-short corpora are ConfigErrors naming what is wrong") {
  for (const double v : {-0.1, 0.6, std::nan("")}) {
    const std::string m = message_of<ConfigError>([&] { ByteCorpus(Bytes(1000), 8, v); });
    CHECK(m.find("val_fraction") != std::string::npos);
  }
  CHECK(message_of<ConfigError>([] { ByteCorpus(Bytes(1000), 0); }).find("seq_len") !=
        std::string::npos);

  // 20 bytes at 0.1: validation has 2 bytes, a window needs 17.
  const std::string m = message_of<ConfigError>([] { ByteCorpus(Bytes(20), 16, 0.1); });
  INFO(m);
  CHECK(m.find("corpus = 20 bytes") != std::string::npos);
  CHECK(m.find("seq_len + 1 = 17") != std::string::npos);
  CHECK(m.find("validation split 2") != std::string::npos);
  // Without a validation split only the train split must hold a window.
  const std::string t = message_of<ConfigError>([] { ByteCorpus(Bytes(16), 16, 0.0); });
  INFO(t);
  CHECK(t.find("16 bytes") != std::string::npos);
  CHECK(t.find("the train split") != std::string::npos);
  CHECK_THROWS_AS(ByteCorpus(Bytes{}, 1, 0.0), ConfigError);
  CHECK_NOTHROW(ByteCorpus(Bytes(34), 16, 0.5));  // 17 + 17: both exactly one window

  const ByteCorpus ok(Bytes(100), 4);
  Rng rng(1);
  CHECK_THROWS_AS((void)ok.sample_train(0, rng), ConfigError);
  CHECK_THROWS_AS((void)ok.validation(0), ConfigError);
}

TEST_CASE("sample_train: windows inside the train split, targets shifted by one") {
  const Bytes text = de_bruijn();
  std::vector<std::size_t> pos(65536);
  for (std::size_t i = 0; i + 1 < text.size(); ++i) pos[text[i] * 256 + text[i + 1]] = i;
  for (const int s : {1, 2, 16, 100}) {
    const ByteCorpus corpus(text, s, 0.1);
    REQUIRE(corpus.validation_bytes() == 6554);  // round(6553.7)
    const std::uint64_t seed = 1000 + static_cast<std::uint64_t>(s);
    INFO("seed " << seed << " seq_len " << s);
    Rng rng(seed);
    const int rows = 64;
    const Batch b = corpus.sample_train(rows, rng);
    REQUIRE(b.sequences == rows);
    REQUIRE(b.seq_len == s);
    REQUIRE(b.inputs.size() == static_cast<std::size_t>(rows * s));
    REQUIRE(b.targets.size() == b.inputs.size());
    for (int r = 0; r < rows; ++r) {
      // The first input and first target are adjacent bytes: they give the start.
      const std::size_t p = pos[b.inputs[r * s] * 256 + b.targets[r * s]];
      REQUIRE(p + s + 1 <= corpus.train_bytes());
      for (int j = 0; j < s; ++j) {
        REQUIRE(b.inputs[r * s + j] == text[p + j]);
        REQUIRE(b.targets[r * s + j] == text[p + j + 1]);
      }
    }
  }
}

TEST_CASE("sample_train draws every start, the last one included, about equally often") {
  // 24 distinct bytes, half for training: starts 0..3 for seq_len 8.
  Bytes text(24);
  std::iota(text.begin(), text.end(), std::uint8_t{0});
  const ByteCorpus corpus(text, 8, 0.5);
  REQUIRE(corpus.train_bytes() == 12);
  const std::uint64_t seed = 77;
  INFO("seed " << seed);
  Rng rng(seed);
  const Batch b = corpus.sample_train(4000, rng);
  std::vector<int> count(24);
  for (int r = 0; r < b.sequences; ++r) ++count[b.inputs[r * 8]];
  for (int start = 0; start < 4; ++start) {
    INFO("start " << start);
    CHECK(count[start] > 850);  // expected 1000, standard deviation about 27
    CHECK(count[start] < 1150);
  }
  for (int start = 4; start < 24; ++start) CHECK(count[start] == 0);
}

TEST_CASE("sample_train is reproducible from a seed and from a saved Rng state") {
  const ByteCorpus corpus(random_bytes(5000, 3), 32);
  Rng a(9), b(9), c(10);
  const Batch first = corpus.sample_train(8, a);
  CHECK(same(first, corpus.sample_train(8, b)));
  CHECK_FALSE(same(first, corpus.sample_train(8, c)));

  // A checkpoint between batches: restoring its state gives the next batch again.
  const Rng::State saved = a.state();
  const Batch second = corpus.sample_train(8, a);
  CHECK_FALSE(same(first, second));
  Rng restored(12345);
  restored.set_state(saved);
  CHECK(same(second, corpus.sample_train(8, restored)));
}

TEST_CASE("validation() and windows() match the window rule, edge (i+1)*S+1 == size included") {
  const Bytes text = random_bytes(1000, 5);
  // Validation has 100 bytes: seq_len 9 gives 11 windows, the last target being the
  // split's last byte (11*9+1 == 100); seq_len 10 gives 9 (10*10+1 > 100).
  for (const int s : {1, 9, 10, 33, 99}) {
    INFO("seq_len " << s);
    const ByteCorpus corpus(text, s, 0.1);
    const std::span<const std::uint8_t> val(text.data() + 900, 100);
    check_windows(corpus.validation(), val, s, INT_MAX);
    check_windows(corpus.validation(3), val, s, 3);
  }
  CHECK(ByteCorpus(text, 9, 0.1).validation().sequences == 11);
  CHECK(ByteCorpus(text, 10, 0.1).validation().sequences == 9);

  for (const int s : {1, 2, 7}) {
    for (std::size_t n = static_cast<std::size_t>(s) + 1; n <= static_cast<std::size_t>(5 * s + 2);
         ++n) {
      INFO("seq_len " << s << " size " << n);
      const std::span<const std::uint8_t> t(text.data(), n);
      check_windows(ByteCorpus::windows(t, s), t, s, INT_MAX);
      check_windows(ByteCorpus::windows(t, s, 2), t, s, 2);
    }
  }
  const std::string m = message_of<ConfigError>(
      [&] { (void)ByteCorpus::windows(std::span<const std::uint8_t>(text.data(), 5), 5); });
  INFO(m);
  CHECK(m.find("5 bytes") != std::string::npos);
  CHECK(m.find("seq_len + 1 = 6") != std::string::npos);
  CHECK_THROWS_AS((void)ByteCorpus::windows(text, 0), ConfigError);
  CHECK_THROWS_AS((void)ByteCorpus::windows(text, 4, 0), ConfigError);
}

TEST_CASE("read_corpus: plain files, missing files, folders, size limit") {
  ScratchDir dir;
  Bytes all(256);
  std::iota(all.begin(), all.end(), std::uint8_t{0});
  write_file(dir / "plain.txt", all);
  CHECK(read_corpus(dir / "plain.txt") == all);
  write_file(dir / "empty.txt", {});
  CHECK(read_corpus(dir / "empty.txt").empty());

  const auto missing = dir / "no_such_corpus.txt";
  const std::string m = message_of<IoError>([&] { (void)read_corpus(missing); });
  INFO(m);
  CHECK(m.find(missing.string()) != std::string::npos);
  CHECK(m.find('\n') == std::string::npos);
  CHECK(m.find("jargon") == std::string::npos);
  // The default corpus' message says how to get it, still in one line.
  const std::string d = disagmoe::runtime::detail::missing_corpus_message(kDefaultCorpus);
  INFO(d);
  CHECK(d.find(kDefaultCorpus) != std::string::npos);
  CHECK(d.find("jargon-text (scripts/setup)") != std::string::npos);
  CHECK(d.find("--corpus FILE") != std::string::npos);
  CHECK(d.find('\n') == std::string::npos);
  if (!std::filesystem::exists(kDefaultCorpus))
    CHECK(message_of<IoError>([] { (void)read_corpus(kDefaultCorpus); }) == d);

  CHECK(message_of<IoError>([&] { (void)read_corpus(dir.dir); }).find("regular file") !=
        std::string::npos);
  CHECK(message_of<IoError>([&] { (void)read_corpus(dir / "plain.txt", 255); })
            .find("at most 255 bytes") != std::string::npos);
  CHECK(read_corpus(dir / "plain.txt", 256) == all);
}

#if DISAGMOE_HAS_ZLIB()
namespace {
Bytes file_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes((std::istreambuf_iterator<char>(in)), {});
}

void write_gz(const std::filesystem::path& path, const Bytes& bytes) {
  gzFile f = gzopen(path.c_str(), "wb9");
  REQUIRE(f != nullptr);
  if (!bytes.empty())
    REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) ==
            static_cast<int>(bytes.size()));
  REQUIRE(gzclose(f) == Z_OK);
}
}  // namespace

TEST_CASE("read_corpus: gzip round trips (by magic bytes, not by name)") {
  ScratchDir dir;
  const Bytes text = random_bytes(200000, 11, 40);  // compressible, several inflate chunks
  write_gz(dir / "text.gz", text);
  REQUIRE(file_bytes(dir / "text.gz").size() < text.size());
  CHECK(read_corpus(dir / "text.gz") == text);
  std::filesystem::copy_file(dir / "text.gz", dir / "text.txt");
  CHECK(read_corpus(dir / "text.txt") == text);

  write_gz(dir / "empty.gz", {});
  CHECK(read_corpus(dir / "empty.gz").empty());

  // Concatenated members decompress to the concatenation, as gzip -d does.
  const Bytes tail = random_bytes(1000, 12);
  write_gz(dir / "tail.gz", tail);
  Bytes two = file_bytes(dir / "text.gz");
  const Bytes second = file_bytes(dir / "tail.gz");
  two.insert(two.end(), second.begin(), second.end());
  write_file(dir / "two.gz", two);
  Bytes both = text;
  both.insert(both.end(), tail.begin(), tail.end());
  CHECK(read_corpus(dir / "two.gz") == both);

  // The limit counts decompressed bytes: a limit the file is within still fails.
  const std::size_t limit = file_bytes(dir / "text.gz").size() + 1;
  REQUIRE(limit < text.size());
  const std::string m = message_of<IoError>([&] { (void)read_corpus(dir / "text.gz", limit); });
  INFO(m);
  CHECK(m.find("at most " + std::to_string(limit) + " bytes once decompressed") !=
        std::string::npos);
  CHECK(read_corpus(dir / "text.gz", text.size()) == text);
}

TEST_CASE("read_corpus: truncated, corrupt and padded gzip files are IoErrors") {
  ScratchDir dir;
  write_gz(dir / "good.gz", random_bytes(50000, 13));
  const Bytes good = file_bytes(dir / "good.gz");
  const auto check_bad = [&](const Bytes& bad, const std::string& what, const char* label) {
    INFO(label);
    write_file(dir / "bad.gz", bad);
    const std::string m = message_of<IoError>([&] { (void)read_corpus(dir / "bad.gz"); });
    INFO(m);
    CHECK(m.find((dir / "bad.gz").string()) != std::string::npos);
    CHECK(m.find(what) != std::string::npos);
  };
  check_bad(Bytes(good.begin(), good.begin() + static_cast<long>(good.size() / 2)), "truncated",
            "half the file");
  check_bad(Bytes(good.begin(), good.end() - 1), "truncated", "trailer cut short");
  check_bad(Bytes(good.begin(), good.begin() + 2), "truncated", "magic only");
  Bytes crc = good;
  crc[crc.size() - 8] ^= 0xff;  // the CRC-32 of the trailer (RFC 1952 §2.3)
  check_bad(crc, "valid gzip data", "bad CRC");
  Bytes body = good;
  body[body.size() / 2] ^= 0x55;
  check_bad(body, "gzip", "corrupt body");
  Bytes padded = good;
  padded.push_back(0);
  padded.push_back(0);
  check_bad(padded, "trailing bytes", "trailing zeros");
}
#else
TEST_CASE("read_corpus: a gzipped file without zlib is an IoError saying so") {
  ScratchDir dir;
  write_file(dir / "text.gz", Bytes{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3});
  const std::string m = message_of<IoError>([&] { (void)read_corpus(dir / "text.gz"); });
  INFO(m);
  CHECK(m.find("no zlib") != std::string::npos);
  MESSAGE("built without zlib: gzip round-trip tests skipped");
}
#endif

TEST_CASE("entropy_baselines: closed forms") {
  const double ln2 = std::log(2.0);
  const auto h = [](const Bytes& b) { return entropy_baselines(b); };
  CHECK(h({}).unigram == 0.0);
  CHECK(h({}).bigram == 0.0);
  CHECK(h({7}).unigram == 0.0);
  CHECK(h({7}).bigram == 0.0);

  const EntropyBaselines same_byte = h(Bytes(1000, 'x'));
  CHECK(same_byte.unigram == doctest::Approx(0.0));
  CHECK(same_byte.bigram == doctest::Approx(0.0));

  Bytes abab;
  for (int i = 0; i < 500; ++i) abab.insert(abab.end(), {'a', 'b'});
  CHECK(h(abab).unigram == doctest::Approx(ln2).epsilon(1e-12));
  CHECK(h(abab).bigram == doctest::Approx(0.0));

  // "aab" m times: p(a) = 2/3; pairs aa, ab m times each, ba m - 1 times, so a is
  // followed by a or b with probability 1/2 and b always by a:
  // H2 = (2m / (3m - 1)) ln 2.
  const int m = 300;
  Bytes aab;
  for (int i = 0; i < m; ++i) aab.insert(aab.end(), {'a', 'a', 'b'});
  CHECK(h(aab).unigram == doctest::Approx(std::log(3.0) - 2.0 / 3.0 * ln2).epsilon(1e-12));
  CHECK(h(aab).bigram == doctest::Approx(2.0 * m / (3.0 * m - 1) * ln2).epsilon(1e-12));

  // 0, 1, ..., 255 three times: uniform bytes, each determined by the one before.
  Bytes ramp;
  for (int k = 0; k < 3; ++k)
    for (int b = 0; b < 256; ++b) ramp.push_back(static_cast<std::uint8_t>(b));
  CHECK(h(ramp).unigram == doctest::Approx(std::log(256.0)).epsilon(1e-12));
  CHECK(h(ramp).bigram == doctest::Approx(0.0));

  // De Bruijn B(256, 2), N = 65537: every pair once, so H2 = ln 256; byte 0 occurs
  // 257 times and the others 256 times.
  const double n = 65537.0;
  const double h1 = 257.0 / n * std::log(n / 257.0) + 255.0 * 256.0 / n * std::log(n / 256.0);
  CHECK(h(de_bruijn()).unigram == doctest::Approx(h1).epsilon(1e-12));
  // 65536 equal terms summed: rounding is about 1e-11 relative.
  CHECK(h(de_bruijn()).bigram == doctest::Approx(std::log(256.0)).epsilon(1e-9));
}

TEST_CASE("entropy_baselines: bigram entropy equals H(A,B) - H(A) over the pairs") {
  for (const std::uint64_t seed : {21u, 22u, 23u}) {
    INFO("seed " << seed);
    Rng rng(seed);
    Bytes text(20000);
    // A skewed Markov-ish text so that the two entropies differ.
    std::uint8_t prev = 0;
    for (auto& x : text) {
      x = rng.uniform() < 0.5 ? static_cast<std::uint8_t>(prev + 1)
                              : static_cast<std::uint8_t>(rng.below(1 + seed % 50));
      prev = x;
    }
    std::map<int, double> first;
    std::map<std::pair<int, int>, double> pairs;
    std::map<int, double> single;
    for (std::size_t i = 0; i < text.size(); ++i) single[text[i]] += 1;
    for (std::size_t i = 0; i + 1 < text.size(); ++i) {
      first[text[i]] += 1;
      pairs[{text[i], text[i + 1]}] += 1;
    }
    const auto entropy = [](const auto& counts, double total) {
      double e = 0;
      for (const auto& [key, c] : counts) e -= c / total * std::log(c / total);
      return e;
    };
    const double np = static_cast<double>(text.size() - 1);
    const EntropyBaselines got = entropy_baselines(text);
    CHECK(got.unigram ==
          doctest::Approx(entropy(single, static_cast<double>(text.size()))).epsilon(1e-12));
    CHECK(got.bigram == doctest::Approx(entropy(pairs, np) - entropy(first, np)).epsilon(1e-10));
    CHECK(got.bigram < got.unigram);
  }
}
