#include "gufo/ext/registry.hpp"

extern "C" void corpus_se_register(gufo::ext::Registry &) {}
extern "C" void corpus_se_provider_register(gufo::ext::Registry &) {}
