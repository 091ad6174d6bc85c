#include "gufo/ext/registry.hpp"

extern "C" void corpus_nf_register(gufo::ext::Registry &) {}
extern "C" void corpus_nf_provider_register(gufo::ext::Registry &) {}
