// gufo/ext/provider.hpp: a provider, one implementation of one capability (seed 002,
// section 2): its ID, artifact keys, probe (code: a cheap check on the artifact identity)
// and whether its library was built. Public extension API; every change needs a change
// record in api/changes/.
#pragma once

#include <string>
#include <vector>

#include "gufo/ext/artifact.hpp"

namespace gufo::ext {

// The capabilities (seed 002, section 2), spelled as in extension.json.
namespace capability {
inline constexpr const char *text_generation = "text_generation";
inline constexpr const char *embeddings = "embeddings";
inline constexpr const char *speech_recognition = "speech_recognition";
inline constexpr const char *speech_synthesis = "speech_synthesis";
inline constexpr const char *image_generation = "image_generation";
inline constexpr const char *video_generation = "video_generation";
inline constexpr const char *decisions = "decisions";
}  // namespace capability

// A probe answers, from metadata alone and without touching the GPU, whether this provider
// is the right code to run the file. It must not throw.
using Probe = bool (*)(const ArtifactIdentity &identity);

// One registered provider, in registry order. An unavailable provider (its target library
// was not built) has no probe and a reason ("target gufo_qwen_hip not built: needs hip").
struct ProviderInfo {
  std::string extension;
  std::string id;
  std::string capability;
  std::vector<std::string> keys;
  bool available = true;
  std::string reason;
  Probe probe = nullptr;
};

}  // namespace gufo::ext
