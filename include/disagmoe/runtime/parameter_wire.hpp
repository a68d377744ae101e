// SPDX-License-Identifier: Apache-2.0
/// @file parameter_wire.hpp
/// Parameters with their AdamW moments as one byte string, and back by name: how the
/// workers of a disaggregated run hand their pieces of a model to one rank (checkpoints,
/// sampling). Per slot: name length, rows, cols (u64), the name, then value, m and v.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/runtime/parameter_set.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace disagmoe::runtime {

/// Appends slot `s` (value, m, v) to `out`. O(elements).
template <class T>
void append_slot_bytes(const ParameterSlot<T>& s, std::vector<std::byte>& out) {
  auto put = [&](const void* data, std::size_t n) {
    const auto* b = static_cast<const std::byte*>(data);
    out.insert(out.end(), b, b + n);
  };
  const std::uint64_t len = s.name.size(), rows = static_cast<std::uint64_t>(s.value->rows()),
                      cols = static_cast<std::uint64_t>(s.value->cols());
  for (const std::uint64_t x : {len, rows, cols}) put(&x, sizeof x);
  put(s.name.data(), len);
  for (const model::Matrix<T>* m : {static_cast<const model::Matrix<T>*>(s.value), &s.m, &s.v})
    put(m->data(), static_cast<std::size_t>(m->size()) * sizeof(T));
}

/// Appends every slot of `p` (value, m, v) to `out`. O(elements).
template <class T>
void append_parameter_bytes(const ParameterSet<T>& p, std::vector<std::byte>& out) {
  for (const auto& s : p.slots()) append_slot_bytes(s, out);
}

/// Copies the slots in `bytes` into the slots of the same name among `into`; returns how
/// many were copied. IoError for a truncated message, ConfigError for a shape mismatch.
template <class T>
std::size_t copy_parameter_bytes(std::span<const std::byte> bytes, std::span<ParameterSet<T>* const> into) {
  ParameterSet<T> part;  // slots over matrices decoded from the message
  std::vector<std::unique_ptr<model::Matrix<T>>> store;
  std::size_t at = 0;
  auto get = [&](void* data, std::size_t n) {
    expect<IoError>(at + n <= bytes.size(), "parameter bytes", bytes.size(), "a complete message");
    std::memcpy(data, bytes.data() + at, n);
    at += n;
  };
  while (at < bytes.size()) {
    std::uint64_t len = 0, rows = 0, cols = 0;
    for (std::uint64_t* x : {&len, &rows, &cols}) get(x, sizeof *x);
    expect<IoError>(len <= bytes.size() - at && rows * cols <= bytes.size() / sizeof(T), "parameter bytes", len,
                    "a name and shape that fit the message");
    std::string name(len, '\0');
    get(name.data(), len);
    auto& value = *store.emplace_back(
        std::make_unique<model::Matrix<T>>(static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(cols)));
    auto& grad = *store.emplace_back(std::make_unique<model::Matrix<T>>());
    part.add(name, {}, value, grad);
    auto& slot = part.slots().back();
    for (model::Matrix<T>* m : {&value, &slot.m, &slot.v}) get(m->data(), static_cast<std::size_t>(m->size()) * sizeof(T));
  }
  const ParameterSet<T>* from[] = {&part};
  return copy_matching<T>(from, into);
}

}  // namespace disagmoe::runtime
