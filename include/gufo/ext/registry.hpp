// gufo/ext/registry.hpp: what the generated registration code and extension entry
// points call (seed 002, sections 5 and 8). Public extension API; every change needs a
// change record in api/changes/ (see docs/extensions-generated.md).
//
// This is the stub core lemonpack ships for compile tests: the Registry records what
// ran, in order, so a program linking a generated registry can print it.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace gufo::ext {

// One thing an entry point registered, in call order.
struct RegistryEvent {
  std::string kind;    // "extension", "provider", "option", "unavailable"
  std::string id;      // extension name, provider id or option name
  std::string detail;  // version, capability, or the unavailable reason
  std::vector<std::string> keys;  // a provider's artifact keys
};

class Registry {
 public:
  // An extension entry point announces itself (constants::<name>::name / ::version).
  void add_extension(const char *name, const char *version) {
    events_.push_back({"extension", name, version, {}});
  }

  // A provider entry point registers its provider (constants::<name>::provider_<id>...).
  template <std::size_t N>
  void add_provider(const char *id, const char *capability, const char *const (&keys)[N]) {
    RegistryEvent event{"provider", id, capability, {}};
    for (const char *key : keys) event.keys.emplace_back(key);
    events_.push_back(std::move(event));
  }

  // An extension entry point registers a command-line option it declares.
  void add_option(const char *name) { events_.push_back({"option", name, "", {}}); }

  // Called by the generated registry for a provider whose target was not built.
  void unavailable(const char *provider_id, const char *reason) {
    events_.push_back({"unavailable", provider_id, reason, {}});
  }

  const std::vector<RegistryEvent> &events() const { return events_; }

 private:
  std::vector<RegistryEvent> events_;
};

}  // namespace gufo::ext

// Defined by the generated gufo_ext_registry.cpp: calls every entry point in the
// documented order.
void gufo_ext_register_all(gufo::ext::Registry &registry);
