# NVDRA_MINIMAL_CURL (default on): link a libcurl of our own build, HTTP and
# HTTPS only, statically, instead of Debian's libcurl4.
#
# Why: Debian's libcurl is built with every protocol and library it can use:
# loading it loads LDAP, RTMP (and through it GnuTLS, p11-kit, nettle, gmp),
# libssh2, Kerberos/GSS-API, libpsl, libidn2, zstd and brotli, 4 MiB resident
# in the gpu-kubelet-plugin (bench/README.md, "Where the plugin's RSS goes");
# our API client needs HTTP/1.1 and HTTP/2 over TLS (OpenSSL, nghttp2) and
# gzip (zlib). Debian ships no smaller libcurl, and its libcurl.a needs the
# same shared libraries.
#
# What is built: Debian bookworm's own curl source, the upstream 7.88.1
# tarball plus Debian's patches (debian/patches/series of
# 7.88.1-10+deb12u15, the security fixes Debian backports), both fetched once
# from deb.debian.org into .cache/curl and checked against the SHA-256 sums of
# Debian's .dsc (cmake/DebianSource.cmake); built with curl's CMake (HTTP_ONLY, OpenSSL, nghttp2, zlib,
# threaded resolver, Debian's CA bundle path) at configure time into
# .cache/curl/<version>/install, once per version (about a minute on two
# cores). Needs libnghttp2-dev and patch (scripts/setup installs them). Offline, or when
# any step fails, the configure says why and uses Debian's libcurl (and with
# it the shared OpenSSL: cmake/StaticOpenSSL.cmake).
#
# Security fixes: like every library in the driver's image, this one is
# updated by rebuilding the image; a newer Debian revision is taken by
# changing the three values below.
#
option(NVDRA_MINIMAL_CURL "Build and link a static HTTP(S)-only libcurl from Debian's curl source" ON)
include(${CMAKE_CURRENT_LIST_DIR}/DebianSource.cmake)
# TRUE below once our libcurl is the one linked.
set(NVDRA_MINIMAL_CURL_IN_USE FALSE)

if(NVDRA_MINIMAL_CURL)
  set(_nvdra_curl_version 7.88.1)
  set(_nvdra_curl_debian 7.88.1-10+deb12u15)
  set(_nvdra_curl_orig_sha256 cdb38b72e36bc5d33d5b8810f8018ece1baa29a8f215b4495e495ded82bbf3c7)
  set(_nvdra_curl_debian_sha256 961b78bc48492c5693e4decb352ddd176f343260a8956f48b2887874048ef23b)
  set(_nvdra_curl_pool http://deb.debian.org/debian/pool/main/c/curl)
  set(_nvdra_curl_root ${CMAKE_SOURCE_DIR}/.cache/curl)
  set(_nvdra_curl_dir ${_nvdra_curl_root}/${_nvdra_curl_debian})
  # A cross build (cmake/aarch64-linux-gnu.cmake) builds and installs its own
  # libcurl, with the same toolchain, beside the host's: install-<processor>.
  set(_nvdra_curl_suffix "")
  set(_nvdra_curl_cross_args "")
  if(CMAKE_CROSSCOMPILING)
    set(_nvdra_curl_suffix "-${CMAKE_SYSTEM_PROCESSOR}")
    set(_nvdra_curl_cross_args -DCMAKE_TOOLCHAIN_FILE=${CMAKE_TOOLCHAIN_FILE} -DNVDRA_SYSROOT=${NVDRA_SYSROOT})
  endif()
  set(_nvdra_curl_prefix ${_nvdra_curl_dir}/install${_nvdra_curl_suffix})
  set(_nvdra_curl_stamp ${_nvdra_curl_prefix}/nvdra-built.stamp)

  set(_nvdra_curl_ok TRUE)
  if(NOT EXISTS ${_nvdra_curl_stamp})
    message(STATUS "NVDRA_MINIMAL_CURL: building libcurl ${_nvdra_curl_debian} (HTTP/HTTPS only) into ${_nvdra_curl_prefix}")
    nvdra_debian_source(_nvdra_curl POOL ${_nvdra_curl_pool} DIR ${_nvdra_curl_dir}
      ORIG curl_${_nvdra_curl_version}.orig.tar.gz ${_nvdra_curl_orig_sha256}
      DEBIAN curl_${_nvdra_curl_debian}.debian.tar.xz ${_nvdra_curl_debian_sha256})
    _nvdra_debian_step(_nvdra_curl_OK "NVDRA_MINIMAL_CURL: configuring curl"
      COMMAND ${CMAKE_COMMAND} -S ${_nvdra_curl_SOURCE_DIR} -B ${_nvdra_curl_dir}/build${_nvdra_curl_suffix}
        -G Ninja ${_nvdra_curl_cross_args} -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=${_nvdra_curl_prefix}
        -DCMAKE_INSTALL_LIBDIR=lib -DCMAKE_C_COMPILER_LAUNCHER=${CMAKE_C_COMPILER_LAUNCHER}
        -DBUILD_SHARED_LIBS=OFF -DBUILD_CURL_EXE=OFF -DBUILD_TESTING=OFF -DPICKY_COMPILER=OFF
        -DHTTP_ONLY=ON -DCURL_DISABLE_LDAP=ON -DCURL_DISABLE_LDAPS=ON
        -DCURL_USE_OPENSSL=ON -DUSE_NGHTTP2=ON -DCURL_ZLIB=ON -DENABLE_THREADED_RESOLVER=ON
        -DCURL_BROTLI=OFF -DCURL_ZSTD=OFF -DCURL_USE_LIBPSL=OFF -DCURL_USE_LIBSSH2=OFF -DCURL_USE_LIBSSH=OFF
        -DUSE_LIBIDN2=OFF -DCURL_USE_GSSAPI=OFF
        -DCURL_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt -DCURL_CA_PATH=/etc/ssl/certs)
    _nvdra_debian_step(_nvdra_curl_OK "NVDRA_MINIMAL_CURL: building curl" COMMAND ${CMAKE_COMMAND} --build ${_nvdra_curl_dir}/build${_nvdra_curl_suffix})
    _nvdra_debian_step(_nvdra_curl_OK "NVDRA_MINIMAL_CURL: installing curl" COMMAND ${CMAKE_COMMAND} --install ${_nvdra_curl_dir}/build${_nvdra_curl_suffix})
    set(_nvdra_curl_ok ${_nvdra_curl_OK})
    if(_nvdra_curl_ok)
      file(TOUCH ${_nvdra_curl_stamp})
    else()
      message(WARNING "NVDRA_MINIMAL_CURL: using Debian's libcurl (-DNVDRA_MINIMAL_CURL=OFF skips this attempt)")
    endif()
  endif()
  if(_nvdra_curl_ok)
    # FindCURL (src/k8s) looks for a CURLConfig.cmake first: ours.
    set(CURL_DIR ${_nvdra_curl_prefix}/lib/cmake/CURL CACHE PATH "libcurl's CMake package" FORCE)
    message(STATUS "NVDRA_MINIMAL_CURL: static libcurl ${_nvdra_curl_debian} from ${_nvdra_curl_prefix}")
    set(NVDRA_MINIMAL_CURL_IN_USE TRUE)
  elseif(CURL_DIR MATCHES "/\\.cache/curl/")
    unset(CURL_DIR CACHE)
  endif()
elseif(CURL_DIR MATCHES "/\\.cache/curl/")
  unset(CURL_DIR CACHE)  # the option was on in this build dir before
endif()
