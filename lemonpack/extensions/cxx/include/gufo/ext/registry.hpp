// gufo/ext/registry.hpp: what the generated registration code and the extension entry
// points call (seed 002, sections 5 and 8). Public extension API; every change needs a
// change record in api/changes/ (see docs/extensions-generated.md).
//
// The generated gufo_ext_registry.cpp defines gufo_ext_register_all, which calls every
// extension entry, then every provider entry (or Registry::unavailable for a provider whose
// target was not built), in the registry's fixed order; before each extension's calls it
// names the extension with Registry::set_extension. The Registry keeps what ran, in order,
// so the CLI, the server and the diagnostics all see the same list (gufo-registry prints it).
#pragma once

#include <cstddef>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "gufo/ext/artifact.hpp"
#include "gufo/ext/provider.hpp"

namespace gufo::ext {

// One thing an entry point registered, in call order.
struct RegistryEvent {
  std::string kind;    // "extension", "provider", "option", "unavailable"
  std::string id;      // extension name, provider id or option name
  std::string detail;  // version, capability, or the unavailable reason
  std::vector<std::string> keys;  // a provider's artifact keys
};

// An extension as its entry point announced it.
struct ExtensionInfo {
  std::string name;
  std::string version;
  std::vector<std::string> options;
};

class Registry {
 public:
  // Generated code: the entries called next belong to this extension.
  void set_extension(const char *name) { current_ = name; }

  // An extension entry point announces itself (constants::<name>::name / ::version).
  void add_extension(const char *name, const char *version) {
    extensions_.push_back({name, version, {}});
    events_.push_back({"extension", name, version, {}});
  }

  // A provider entry point registers its provider (constants::<name>::provider_<id>...) and
  // its probe: the code that decides, from the artifact identity, whether it runs a file.
  // A provider registered without a probe is listed but never chosen.
  template <std::size_t N>
  void add_provider(const char *id, const char *capability, const char *const (&keys)[N], Probe probe = nullptr) {
    ProviderInfo info{current_, id, capability, {}, true, "", probe};
    for (const char *key : keys) info.keys.emplace_back(key);
    events_.push_back({"provider", id, capability, info.keys});
    providers_.push_back(std::move(info));
  }

  // An extension entry point registers a command-line option it declares.
  void add_option(const char *name) {
    if (!extensions_.empty()) extensions_.back().options.emplace_back(name);
    events_.push_back({"option", name, "", {}});
  }

  // Generated code, for a provider whose target was not built: listed, with the reason.
  void unavailable(const char *extension, const char *provider_id, const char *capability,
                   std::initializer_list<const char *> keys, const char *reason) {
    ProviderInfo info{extension, provider_id, capability, {}, false, reason, nullptr};
    for (const char *key : keys) info.keys.emplace_back(key);
    events_.push_back({"unavailable", provider_id, reason, info.keys});
    providers_.push_back(std::move(info));
  }

  // The short form of API 0.1.1 (no extension, capability or keys).
  void unavailable(const char *provider_id, const char *reason) {
    unavailable(current_.c_str(), provider_id, "", {}, reason);
  }

  // The first available provider of capability whose probe says yes (seed 002, section 4),
  // asked in registry order; nullptr when none does ("No text provider found for model
  // architecture ...").
  const ProviderInfo *pick(const std::string &capability, const ArtifactIdentity &identity) const {
    for (const ProviderInfo &p : providers_)
      if (p.available && p.capability == capability && p.probe != nullptr && p.probe(identity)) return &p;
    return nullptr;
  }

  const std::vector<ProviderInfo> &providers() const { return providers_; }
  const std::vector<ExtensionInfo> &extensions() const { return extensions_; }
  const std::vector<RegistryEvent> &events() const { return events_; }

 private:
  std::string current_;
  std::vector<ExtensionInfo> extensions_;
  std::vector<ProviderInfo> providers_;
  std::vector<RegistryEvent> events_;
};

}  // namespace gufo::ext

// Defined by the generated gufo_ext_registry.cpp: calls every entry point in the
// documented order.
void gufo_ext_register_all(gufo::ext::Registry &registry);
