// gufo-registry: the registry a build compiled in, as the core sees it at start-up (seed 002,
// sections 6 and 8). Calls gufo_ext_register_all (every entry point, in registry order) and
// prints what registered:
//
//   gufo-registry                 one line per extension, option and provider, in order
//   gufo-registry --json          a JSON array, one object per provider in registry order:
//                                 {"extension", "provider", "capability", "keys", "available", "reason"}
//   gufo-registry --pick CAPABILITY --architecture ARCH [--meta KEY=VALUE]... [--tensor NAME=TYPE]...
//                                 asks the probes (code) in order; prints the first yes, or
//                                 "No <capability> provider found for model architecture '<ARCH>'" (exit 1)
//
// Exit 0, 1 when --pick finds no provider, 2 on a usage error.
#include <cstdio>
#include <cstring>
#include <string>

#include "gufo/ext/registry.hpp"
#include "gufo_ext_constants.hpp"

namespace {

std::string json_string(const std::string &s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

void print_json(const gufo::ext::Registry &registry) {
  std::string out = "[";
  bool first = true;
  for (const gufo::ext::ProviderInfo &p : registry.providers()) {
    out += first ? "" : ",";
    first = false;
    out += "{\"extension\":" + json_string(p.extension) + ",\"provider\":" + json_string(p.id) +
           ",\"capability\":" + json_string(p.capability) + ",\"keys\":[";
    for (std::size_t i = 0; i < p.keys.size(); ++i) out += (i ? "," : "") + json_string(p.keys[i]);
    out += "],\"available\":";
    out += p.available ? "true" : "false";
    out += ",\"reason\":" + (p.available ? std::string("null") : json_string(p.reason)) + "}";
  }
  std::printf("%s]\n", out.c_str());
}

void print_text(const gufo::ext::Registry &registry) {
  std::printf("extension API %s\n", gufo::ext::constants::api_version);
  for (const gufo::ext::ExtensionInfo &e : registry.extensions()) {
    std::printf("extension %s %s\n", e.name.c_str(), e.version.c_str());
    for (const std::string &o : e.options) std::printf("  option %s\n", o.c_str());
  }
  for (const gufo::ext::ProviderInfo &p : registry.providers()) {
    std::printf("provider %s %s %s", p.extension.c_str(), p.id.c_str(), p.capability.c_str());
    for (const std::string &k : p.keys) std::printf(" %s", k.c_str());
    if (p.available)
      std::printf(" available\n");
    else
      std::printf(" unavailable: %s\n", p.reason.c_str());
  }
}

int usage(const char *why) {
  std::fprintf(stderr, "gufo-registry: %s\nusage: gufo-registry [--json | --pick CAPABILITY --architecture ARCH "
                       "[--meta KEY=VALUE]... [--tensor NAME=TYPE]...]\n", why);
  return 2;
}

bool split(const char *arg, std::string &left, std::string &right) {
  const char *eq = std::strchr(arg, '=');
  if (eq == nullptr) return false;
  left.assign(arg, eq);
  right.assign(eq + 1);
  return true;
}

}  // namespace

int main(int argc, char **argv) {
  gufo::ext::Registry registry;
  gufo_ext_register_all(registry);
  if (argc == 1) {
    print_text(registry);
    return 0;
  }
  if (argc == 2 && std::strcmp(argv[1], "--json") == 0) {
    print_json(registry);
    return 0;
  }
  std::string capability;
  gufo::ext::ArtifactIdentity identity;
  identity.format = "gguf";
  for (int i = 1; i < argc; ++i) {
    const char *flag = argv[i];
    if (i + 1 >= argc) return usage("a flag needs a value");
    const char *value = argv[++i];
    std::string left, right;
    if (std::strcmp(flag, "--pick") == 0) {
      capability = value;
    } else if (std::strcmp(flag, "--architecture") == 0) {
      identity.architecture = value;
      identity.metadata["general.architecture"] = value;
    } else if (std::strcmp(flag, "--meta") == 0 && split(value, left, right)) {
      identity.metadata[left] = right;
    } else if (std::strcmp(flag, "--tensor") == 0 && split(value, left, right)) {
      identity.tensors.push_back({left, {}, right});
    } else {
      return usage("unknown flag or malformed value");
    }
  }
  if (capability.empty()) return usage("--pick CAPABILITY is required with --architecture, --meta, --tensor");
  const gufo::ext::ProviderInfo *chosen = registry.pick(capability, identity);
  if (chosen == nullptr) {
    std::string word = capability == "text_generation" ? "text" : capability;
    std::printf("No %s provider found for model architecture '%s'\n", word.c_str(), identity.architecture.c_str());
    return 1;
  }
  std::printf("%s %s\n", chosen->extension.c_str(), chosen->id.c_str());
  return 0;
}
