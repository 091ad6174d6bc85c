#include "gufo/ext/registry.hpp"

extern "C" void corpus_ty_register(gufo::ext::Registry &) {}
extern "C" void corpus_ty_provider_register(gufo::ext::Registry &) {}
