# NVDRA_MINIMAL_CURL (default off): link a libcurl of our own build, HTTP and
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
# Debian's .dsc; built with curl's CMake (HTTP_ONLY, OpenSSL, nghttp2, zlib,
# threaded resolver, Debian's CA bundle path) at configure time into
# .cache/curl/<version>/install, once per version (about a minute on two
# cores). Needs libnghttp2-dev and patch (scripts/setup installs them). Offline, or when
# any step fails, the configure says why and uses Debian's libcurl.
#
# To move to a newer Debian revision: change _nvdra_curl_debian and the two
# sums (from the new .dsc).

option(NVDRA_MINIMAL_CURL "Build and link a static HTTP(S)-only libcurl from Debian's curl source" OFF)

if(NVDRA_MINIMAL_CURL)
  set(_nvdra_curl_version 7.88.1)
  set(_nvdra_curl_debian 7.88.1-10+deb12u15)
  set(_nvdra_curl_orig_sha256 cdb38b72e36bc5d33d5b8810f8018ece1baa29a8f215b4495e495ded82bbf3c7)
  set(_nvdra_curl_debian_sha256 961b78bc48492c5693e4decb352ddd176f343260a8956f48b2887874048ef23b)
  set(_nvdra_curl_pool http://deb.debian.org/debian/pool/main/c/curl)
  set(_nvdra_curl_root ${CMAKE_SOURCE_DIR}/.cache/curl)
  set(_nvdra_curl_dir ${_nvdra_curl_root}/${_nvdra_curl_debian})
  set(_nvdra_curl_prefix ${_nvdra_curl_dir}/install)
  set(_nvdra_curl_stamp ${_nvdra_curl_prefix}/nvdra-built.stamp)

  # Runs one step; on failure says why and clears _nvdra_curl_ok.
  macro(_nvdra_curl_step what)
    if(_nvdra_curl_ok)
      execute_process(${ARGN} RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _out)
      if(NOT _rc EQUAL 0)
        string(LENGTH "${_out}" _len)
        if(_len GREATER 2000)
          math(EXPR _from "${_len} - 2000")
          string(SUBSTRING "${_out}" ${_from} -1 _out)
        endif()
        message(WARNING "NVDRA_MINIMAL_CURL: ${what} failed (${_rc}):\n${_out}")
        set(_nvdra_curl_ok FALSE)
      endif()
    endif()
  endmacro()

  set(_nvdra_curl_ok TRUE)
  if(NOT EXISTS ${_nvdra_curl_stamp})
    message(STATUS "NVDRA_MINIMAL_CURL: building libcurl ${_nvdra_curl_debian} (HTTP/HTTPS only) into ${_nvdra_curl_prefix}")
    foreach(_pair "curl_${_nvdra_curl_version}.orig.tar.gz;${_nvdra_curl_orig_sha256}"
                  "curl_${_nvdra_curl_debian}.debian.tar.xz;${_nvdra_curl_debian_sha256}")
      list(GET _pair 0 _file)
      list(GET _pair 1 _sum)
      set(_path ${_nvdra_curl_root}/${_file})
      set(_have "")
      if(EXISTS ${_path})
        file(SHA256 ${_path} _have)
      endif()
      # Downloads only when the cached file is missing or its sum is wrong.
      # (Not file(DOWNLOAD EXPECTED_HASH): a failed download is then a
      # configure error, and offline must fall back instead.)
      if(_nvdra_curl_ok AND NOT _have STREQUAL _sum)
        file(DOWNLOAD ${_nvdra_curl_pool}/${_file} ${_path}.part TLS_VERIFY ON TIMEOUT 120 STATUS _status)
        list(GET _status 0 _code)
        list(GET _status 1 _why)
        if(_code EQUAL 0)
          file(SHA256 ${_path}.part _have)
          set(_why "SHA-256 ${_have}, expected ${_sum}")
        endif()
        if(_code EQUAL 0 AND _have STREQUAL _sum)
          file(RENAME ${_path}.part ${_path})
        else()
          message(WARNING "NVDRA_MINIMAL_CURL: cannot get ${_nvdra_curl_pool}/${_file} (${_why}); "
                          "using Debian's libcurl. Configure again when online, or set -DNVDRA_MINIMAL_CURL=OFF.")
          file(REMOVE ${_path}.part)
          set(_nvdra_curl_ok FALSE)
        endif()
      endif()
    endforeach()
    if(_nvdra_curl_ok)
      file(REMOVE_RECURSE ${_nvdra_curl_dir})
      file(MAKE_DIRECTORY ${_nvdra_curl_dir})
    endif()
    _nvdra_curl_step("unpacking curl's source"
      COMMAND ${CMAKE_COMMAND} -E tar xf ${_nvdra_curl_root}/curl_${_nvdra_curl_version}.orig.tar.gz
      WORKING_DIRECTORY ${_nvdra_curl_dir})
    _nvdra_curl_step("unpacking Debian's patches"
      COMMAND ${CMAKE_COMMAND} -E tar xf ${_nvdra_curl_root}/curl_${_nvdra_curl_debian}.debian.tar.xz
      WORKING_DIRECTORY ${_nvdra_curl_dir})
    # Debian's patches in series order, as dpkg-source applies them.
    find_program(_nvdra_patch patch)
    if(_nvdra_curl_ok AND NOT _nvdra_patch)
      message(WARNING "NVDRA_MINIMAL_CURL: no patch program (Debian package patch) to apply Debian's fixes")
      set(_nvdra_curl_ok FALSE)
    endif()
    if(_nvdra_curl_ok)
      file(STRINGS ${_nvdra_curl_dir}/debian/patches/series _series)
      foreach(_patch IN LISTS _series)
        string(STRIP "${_patch}" _patch)
        if(_patch STREQUAL "" OR _patch MATCHES "^#")
          continue()
        endif()
        _nvdra_curl_step("Debian patch ${_patch}"
          COMMAND ${_nvdra_patch} -p1 --batch --no-backup-if-mismatch -i ${_nvdra_curl_dir}/debian/patches/${_patch}
          WORKING_DIRECTORY ${_nvdra_curl_dir}/curl-${_nvdra_curl_version})
      endforeach()
    endif()
    _nvdra_curl_step("configuring curl"
      COMMAND ${CMAKE_COMMAND} -S ${_nvdra_curl_dir}/curl-${_nvdra_curl_version} -B ${_nvdra_curl_dir}/build
        -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=${_nvdra_curl_prefix}
        -DCMAKE_INSTALL_LIBDIR=lib -DCMAKE_C_COMPILER_LAUNCHER=${CMAKE_C_COMPILER_LAUNCHER}
        -DBUILD_SHARED_LIBS=OFF -DBUILD_CURL_EXE=OFF -DBUILD_TESTING=OFF -DPICKY_COMPILER=OFF
        -DHTTP_ONLY=ON -DCURL_DISABLE_LDAP=ON -DCURL_DISABLE_LDAPS=ON
        -DCURL_USE_OPENSSL=ON -DUSE_NGHTTP2=ON -DCURL_ZLIB=ON -DENABLE_THREADED_RESOLVER=ON
        -DCURL_BROTLI=OFF -DCURL_ZSTD=OFF -DCURL_USE_LIBPSL=OFF -DCURL_USE_LIBSSH2=OFF -DCURL_USE_LIBSSH=OFF
        -DUSE_LIBIDN2=OFF -DCURL_USE_GSSAPI=OFF
        -DCURL_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt -DCURL_CA_PATH=/etc/ssl/certs)
    _nvdra_curl_step("building curl" COMMAND ${CMAKE_COMMAND} --build ${_nvdra_curl_dir}/build)
    _nvdra_curl_step("installing curl" COMMAND ${CMAKE_COMMAND} --install ${_nvdra_curl_dir}/build)
    if(_nvdra_curl_ok)
      file(TOUCH ${_nvdra_curl_stamp})
    else()
      message(WARNING "NVDRA_MINIMAL_CURL: using Debian's libcurl")
    endif()
  endif()
  if(_nvdra_curl_ok)
    # FindCURL (src/k8s) looks for a CURLConfig.cmake first: ours.
    set(CURL_DIR ${_nvdra_curl_prefix}/lib/cmake/CURL CACHE PATH "libcurl's CMake package" FORCE)
    message(STATUS "NVDRA_MINIMAL_CURL: static libcurl ${_nvdra_curl_debian} from ${_nvdra_curl_prefix}")
  elseif(CURL_DIR MATCHES "/\\.cache/curl/")
    unset(CURL_DIR CACHE)
  endif()
elseif(CURL_DIR MATCHES "/\\.cache/curl/")
  unset(CURL_DIR CACHE)  # the option was on in this build dir before
endif()
