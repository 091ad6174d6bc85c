#include "gufo/ext/registry.hpp"

extern "C" void corpus_uf_register(gufo::ext::Registry &) {}
extern "C" void corpus_uf_provider_register(gufo::ext::Registry &) {}
