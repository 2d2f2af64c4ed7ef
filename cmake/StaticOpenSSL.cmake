# OpenSSL::SSL and OpenSSL::Crypto: Debian's static libssl.a and libcrypto.a
# when nothing else in our processes loads the shared ones
# (NVDRA_STATIC_OPENSSL, default on), else Debian's shared libraries.
#
# Why: in the gpu-kubelet-plugin the shared libcrypto and libssl are 4.6 MiB
# resident (a fault maps the page cache's whole large folio, so nearly all of
# their code counts); linked statically, only the objects our libcurl and
# cpp-httplib refer to are in the binary, bound at link time: 0.6 MiB less
# (bench/README.md, "Where the plugin's RSS goes"). OpenSSL's default
# provider refers to every algorithm, so most of libcrypto is linked anyway.
#
# Only with our static libcurl and cpp-httplib (cmake/MinimalCurl.cmake,
# cmake/StaticHttplib.cmake): Debian's libcurl and libcpp-httplib load the
# shared OpenSSL, and a process must not hold two copies of its state.
#
# Security fixes reach a static OpenSSL when the image is rebuilt, which is
# also how they reach the shared one inside the driver's image.

option(NVDRA_STATIC_OPENSSL "Link OpenSSL statically when no Debian library in the link loads it" ON)

set(NVDRA_STATIC_OPENSSL_IN_USE FALSE)
if(NVDRA_STATIC_OPENSSL AND NVDRA_MINIMAL_CURL_IN_USE AND NVDRA_STATIC_HTTPLIB_IN_USE)
  set(NVDRA_STATIC_OPENSSL_IN_USE TRUE)
endif()
# FindOpenSSL caches the libraries it found: search again when the choice
# changed since the last configure of this build folder (or the folder was
# configured before this file existed).
if(NOT "${_NVDRA_OPENSSL_STATIC_CHOICE}" STREQUAL "${NVDRA_STATIC_OPENSSL_IN_USE}")
  unset(OPENSSL_SSL_LIBRARY CACHE)
  unset(OPENSSL_CRYPTO_LIBRARY CACHE)
endif()
set(_NVDRA_OPENSSL_STATIC_CHOICE ${NVDRA_STATIC_OPENSSL_IN_USE} CACHE INTERNAL "")
# A normal variable: every later find_package(OpenSSL), ours in src/ and
# libcurl's CURLConfig.cmake, sees it.
set(OPENSSL_USE_STATIC_LIBS ${NVDRA_STATIC_OPENSSL_IN_USE})
find_package(OpenSSL 3 REQUIRED)
if(NVDRA_STATIC_OPENSSL_IN_USE)
  message(STATUS "NVDRA_STATIC_OPENSSL: static OpenSSL ${OPENSSL_VERSION} (${OPENSSL_CRYPTO_LIBRARY})")
endif()
