// The compiled part of {fmt}, built from Debian's libfmt-dev headers into a
// static archive (cmake/StaticFmt.cmake says why).
//
// format-inl.h holds fmt's non-template functions; with neither FMT_SHARED
// nor FMT_HEADER_ONLY defined they are ordinary external definitions here.
// The templates below are the ones fmt's headers declare but only define in
// format-inl.h (dragonbox::to_decimal, locale_ref) or declare `extern
// template` (format.h), so every other translation unit expects one copy of
// each in the library; the list follows fmt 9.1's headers.

#include <fmt/format-inl.h>

#include <locale>

FMT_BEGIN_NAMESPACE
namespace detail {

template auto dragonbox::to_decimal(float x) noexcept -> dragonbox::decimal_fp<float>;
template auto dragonbox::to_decimal(double x) noexcept -> dragonbox::decimal_fp<double>;

template locale_ref::locale_ref(const std::locale& loc);
template auto locale_ref::get<std::locale>() const -> std::locale;

template auto thousands_sep_impl(locale_ref) -> thousands_sep_result<char>;
template auto decimal_point_impl(locale_ref) -> char;
template auto thousands_sep_impl(locale_ref) -> thousands_sep_result<wchar_t>;
template auto decimal_point_impl(locale_ref) -> wchar_t;

template void buffer<char>::append(const char*, const char*);
template void buffer<wchar_t>::append(const wchar_t*, const wchar_t*);

}  // namespace detail
FMT_END_NAMESPACE
