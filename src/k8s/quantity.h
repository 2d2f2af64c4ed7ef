#pragma once

// Kubernetes resource quantities (k8s.io/apimachinery resource.Quantity) in
// their canonical string form, as the API server writes them back, so that a
// published ResourceSlice compares equal to what the server returns and no
// update is sent for a cosmetic difference.
//
// Thread-safety: pure functions.

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace nvdra::k8s {

// An integer quantity in BinarySI format (resource.NewQuantity(v, BinarySI)):
// the largest power-of-1024 suffix that divides `value` exactly ("81559Mi",
// "1Gi"); values with |value| < 1024 use the decimal form instead ("16",
// "1k" for 1000), as apimachinery does to avoid confusing "0.9765625Ki".
std::string FormatBinarySI(std::int64_t value);

// An integer quantity in DecimalSI format: the largest power-of-1000 suffix
// that divides exactly ("1k", "5M", "999").
std::string FormatDecimalSI(std::int64_t value);

// The integer value of a quantity ("10Gi", "1.5G", "512Mi", "1e3", "100m"),
// rounded up as resource.Quantity.Value() does ("100m" is 1). The grammar is
// apimachinery's: an optional sign, digits with an optional fraction, then
// one suffix: a binary one (Ki..Ei), a decimal one (n, u, m, "", k, M, G, T,
// P, E) or an exponent (e3, E-2). kInvalidArgument for anything else and
// for values beyond int64; the message says what a quantity looks like.
common::StatusOr<std::int64_t> ParseQuantityValue(std::string_view text);

}  // namespace nvdra::k8s
