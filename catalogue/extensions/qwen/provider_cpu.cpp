// qwen: provider entry points of cpu targets (stub: probe, factory and drivers omitted).
#include "gufo/ext/registry.hpp"
#include "gufo_ext_constants.hpp"

namespace c = gufo::ext::constants::qwen;

extern "C" void qwen_cpu_provider_register(gufo::ext::Registry &registry) {
  registry.add_provider(c::provider_qwen27_cpu, "text_generation", c::provider_qwen27_cpu_keys);
}

extern "C" void qwen_guard_provider_register(gufo::ext::Registry &registry) {
  registry.add_provider(c::provider_qwen_guard, "decisions", c::provider_qwen_guard_keys);
}
