#include "gufo/ext/registry.hpp"

extern "C" void corpus_enc_register(gufo::ext::Registry &) {}
extern "C" void corpus_enc_provider_register(gufo::ext::Registry &) {}
