// SPDX-License-Identifier: Apache-2.0
/// @file random.hpp
/// A small, portable random number generator for initialisation and data sampling.
///
/// `std::normal_distribution` and friends are implementation-defined, so a checkpoint
/// made with libstdc++ would not reproduce elsewhere. This generator is xoshiro256**
/// (Blackman and Vigna, "Scrambled linear pseudorandom number generators", 2021),
/// seeded by splitmix64 as its authors recommend; normals use the Box-Muller transform.
/// Its whole state is four 64-bit words, saved and restored by checkpoints.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

namespace disagmoe::model {

/// xoshiro256** with splitmix64 seeding. Deterministic on every platform.
class Rng {
 public:
  using State = std::array<std::uint64_t, 4>;

  /// Seeds the four state words from `seed` with splitmix64.
  explicit Rng(std::uint64_t seed = 0) {
    for (auto& word : s_) {
      seed += 0x9E3779B97F4A7C15ull;
      std::uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      word = z ^ (z >> 31);
    }
  }

  /// Next 64 random bits.
  std::uint64_t next() {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  /// Uniform double in [0, 1) from the top 53 bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

  /// Uniform integer in [0, n) for n >= 1 (Lemire's multiply-shift; bias < n / 2^64).
  std::uint64_t below(std::uint64_t n) {
    __extension__ using U128 = unsigned __int128;  // GCC/Clang; __extension__ keeps -Wpedantic quiet
    return static_cast<std::uint64_t>((static_cast<U128>(next()) * n) >> 64);
  }

  /// Standard normal deviate (Box-Muller; one of the pair is discarded for simplicity).
  double normal() {
    const double u1 = 1.0 - uniform();  // (0, 1]: log stays finite
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

  /// The full state, for checkpoints.
  [[nodiscard]] const State& state() const { return s_; }
  /// Restores a state returned by `state()`.
  void set_state(const State& s) { s_ = s; }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  State s_{};
};

/// A seed for stream `(a, b, c)` of a run seeded with `seed` (splitmix64 finaliser over
/// the words in turn), so that, e.g., layer 3's weights are drawn the same whichever
/// worker initialises them.
inline std::uint64_t derive_seed(std::uint64_t seed, std::uint64_t a, std::uint64_t b = 0, std::uint64_t c = 0) {
  std::uint64_t z = seed;
  for (const std::uint64_t w : {a, b, c}) {
    z += 0x9E3779B97F4A7C15ull + w;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
  }
  return z;
}

}  // namespace disagmoe::model
