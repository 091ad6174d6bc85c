#include "gufo/ext/registry.hpp"

extern "C" void corpus_mf_register(gufo::ext::Registry &) {}
extern "C" void corpus_mf_provider_register(gufo::ext::Registry &) {}
