// gufo/ext/artifact.hpp: what a provider's probe sees of a model file (seed 002, section 4).
// Public extension API; every change needs a change record in api/changes/.
//
// The core reads the artifact identity without loading weights or touching the GPU (for a
// GGUF: general.architecture, the other metadata key/values and the tensor descriptions)
// and hands it to each provider's probe, in registry order; the first yes wins.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace gufo::ext {

// One tensor's description: name, shape in GGML order (ne[0] first) and storage type name
// (GGML's: "F32", "Q4_0", "Q4_K"; a quantized variant is recognised by these types).
struct TensorDesc {
  std::string name;
  std::vector<std::uint64_t> shape;
  std::string type;
};

// The identity of one model file. Scalar metadata values are kept as their text
// ("64", "true", "qwen4exp"); arrays are not materialised.
struct ArtifactIdentity {
  std::string format;        // "gguf"
  std::string architecture;  // general.architecture ("" when absent)
  std::map<std::string, std::string> metadata;
  std::vector<TensorDesc> tensors;

  // The metadata value of key, or nullptr when the file does not have it.
  const std::string *find(const std::string &key) const {
    auto it = metadata.find(key);
    return it == metadata.end() ? nullptr : &it->second;
  }

  // True when the file has key with exactly this value.
  bool has(const std::string &key, const std::string &value) const {
    const std::string *v = find(key);
    return v != nullptr && *v == value;
  }

  // The first tensor whose name is exactly name, or nullptr.
  const TensorDesc *tensor(const std::string &name) const {
    for (const TensorDesc &t : tensors)
      if (t.name == name) return &t;
    return nullptr;
  }

  // The first tensor whose name starts with prefix and ends with suffix (the manifest's
  // "blk.*.ffn_gate_exps.weight" is prefix "blk.", suffix ".ffn_gate_exps.weight"), or nullptr.
  const TensorDesc *tensor(const std::string &prefix, const std::string &suffix) const {
    for (const TensorDesc &t : tensors)
      if (t.name.size() >= prefix.size() + suffix.size() && t.name.compare(0, prefix.size(), prefix) == 0 &&
          t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix) == 0)
        return &t;
    return nullptr;
  }
};

}  // namespace gufo::ext
