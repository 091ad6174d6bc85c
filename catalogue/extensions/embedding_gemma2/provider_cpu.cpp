// embedding_gemma2: provider entry points of cpu targets (stub: probes as code; factory and drivers omitted).
#include "gufo/ext/registry.hpp"
#include "gufo_ext_constants.hpp"

namespace c = gufo::ext::constants::embedding_gemma2;

namespace {

bool probe_embedding_gemma2_cpu_provider_register(const gufo::ext::ArtifactIdentity &a) {
  return a.architecture == "gemma-embedding" && a.has("gemma-embedding.pooling_type", "1");
}

}  // namespace

extern "C" void embedding_gemma2_cpu_provider_register(gufo::ext::Registry &registry) {
  registry.add_provider(c::provider_gemma2_embed_cpu, "embeddings", c::provider_gemma2_embed_cpu_keys, probe_embedding_gemma2_cpu_provider_register);
}
