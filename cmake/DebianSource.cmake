# nvdra_debian_source(): a Debian source package's upstream tarball with
# Debian's patches applied, unpacked at configure time into .cache, for the
# few libraries we build ourselves instead of linking Debian's shared build
# (cmake/MinimalCurl.cmake, cmake/StaticHttplib.cmake say why each).
#
#   nvdra_debian_source(<prefix>
#     POOL <url of the package's folder in Debian's pool>
#     ORIG <orig tarball> <its SHA-256 from the .dsc>
#     DEBIAN <debian tarball> <its SHA-256 from the .dsc>
#     DIR <folder to unpack into>)
#
# Sets, in the caller's scope:
#   <prefix>_OK          TRUE when the source is ready, FALSE after a warning
#                        that says which step failed and why;
#   <prefix>_SOURCE_DIR  the patched upstream tree (<DIR>/source).
#
# The tarballs are downloaded once into DIR's parent and checked against the
# sums of Debian's .dsc; DIR is unpacked and patched again only when its
# stamp is missing, so later configures are offline. Patches are applied in
# debian/patches/series order with `patch -p1`, as dpkg-source does. Offline,
# without `patch`, or when a sum or patch fails, <prefix>_OK is FALSE and the
# caller falls back to Debian's library.

# Included by each module that builds from Debian's source; defined once.
include_guard(GLOBAL)

# Runs one step of `what` while ${ok_var} holds; on failure warns with the
# output's tail and clears ${ok_var} in the caller's scope.
macro(_nvdra_debian_step ok_var what)
  if(${ok_var})
    execute_process(${ARGN} RESULT_VARIABLE _nvdra_rc OUTPUT_VARIABLE _nvdra_out ERROR_VARIABLE _nvdra_out)
    if(NOT _nvdra_rc EQUAL 0)
      string(LENGTH "${_nvdra_out}" _nvdra_len)
      if(_nvdra_len GREATER 2000)
        math(EXPR _nvdra_from "${_nvdra_len} - 2000")
        string(SUBSTRING "${_nvdra_out}" ${_nvdra_from} -1 _nvdra_out)
      endif()
      message(WARNING "${what} failed (${_nvdra_rc}):\n${_nvdra_out}")
      set(${ok_var} FALSE)
    endif()
  endif()
endmacro()

function(nvdra_debian_source prefix)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "POOL;DIR" "ORIG;DEBIAN")
  set(_ok TRUE)
  set(_stamp ${arg_DIR}/nvdra-unpacked.stamp)
  get_filename_component(_downloads ${arg_DIR} DIRECTORY)
  if(NOT EXISTS ${_stamp})
    foreach(_pair ORIG DEBIAN)
      list(GET arg_${_pair} 0 _file)
      list(GET arg_${_pair} 1 _sum)
      set(_path ${_downloads}/${_file})
      set(_have "")
      if(EXISTS ${_path})
        file(SHA256 ${_path} _have)
      endif()
      # Downloads only when the cached file is missing or its sum is wrong.
      # (Not file(DOWNLOAD EXPECTED_HASH): a failed download is then a
      # configure error, and offline must fall back instead.)
      if(_ok AND NOT _have STREQUAL _sum)
        file(DOWNLOAD ${arg_POOL}/${_file} ${_path}.part TLS_VERIFY ON TIMEOUT 120 STATUS _status)
        list(GET _status 0 _code)
        list(GET _status 1 _why)
        if(_code EQUAL 0)
          file(SHA256 ${_path}.part _have)
          set(_why "SHA-256 ${_have}, expected ${_sum}")
        endif()
        if(_code EQUAL 0 AND _have STREQUAL _sum)
          file(RENAME ${_path}.part ${_path})
        else()
          message(WARNING "cannot get ${arg_POOL}/${_file} (${_why}); configure again once "
                          "deb.debian.org is reachable")
          file(REMOVE ${_path}.part)
          set(_ok FALSE)
        endif()
      endif()
    endforeach()
    if(_ok)
      file(REMOVE_RECURSE ${arg_DIR})
      file(MAKE_DIRECTORY ${arg_DIR}/unpack)
    endif()
    list(GET arg_ORIG 0 _orig)
    list(GET arg_DEBIAN 0 _debian)
    _nvdra_debian_step(_ok "unpacking ${_orig}"
      COMMAND ${CMAKE_COMMAND} -E tar xf ${_downloads}/${_orig} WORKING_DIRECTORY ${arg_DIR}/unpack)
    if(_ok)
      # The orig tarball holds one top folder, named as upstream chose.
      file(GLOB _top LIST_DIRECTORIES true ${arg_DIR}/unpack/*)
      list(LENGTH _top _count)
      if(_count EQUAL 1 AND IS_DIRECTORY "${_top}")
        file(RENAME ${_top} ${arg_DIR}/source)
      else()
        message(WARNING "${_orig} does not hold one top folder: ${_top}")
        set(_ok FALSE)
      endif()
    endif()
    _nvdra_debian_step(_ok "unpacking ${_debian}"
      COMMAND ${CMAKE_COMMAND} -E tar xf ${_downloads}/${_debian} WORKING_DIRECTORY ${arg_DIR}/source)
    find_program(NVDRA_PATCH_PROGRAM patch)
    if(_ok AND NOT NVDRA_PATCH_PROGRAM)
      message(WARNING "no patch program (Debian package patch) to apply Debian's fixes to ${_orig}")
      set(_ok FALSE)
    endif()
    if(_ok AND EXISTS ${arg_DIR}/source/debian/patches/series)
      file(STRINGS ${arg_DIR}/source/debian/patches/series _series)
      foreach(_patch IN LISTS _series)
        string(STRIP "${_patch}" _patch)
        if(_patch STREQUAL "" OR _patch MATCHES "^#")
          continue()
        endif()
        _nvdra_debian_step(_ok "Debian patch ${_patch}"
          COMMAND ${NVDRA_PATCH_PROGRAM} -p1 --batch --no-backup-if-mismatch -i debian/patches/${_patch}
          WORKING_DIRECTORY ${arg_DIR}/source)
      endforeach()
    endif()
    if(_ok)
      file(TOUCH ${_stamp})
    endif()
  endif()
  set(${prefix}_OK ${_ok} PARENT_SCOPE)
  set(${prefix}_SOURCE_DIR ${arg_DIR}/source PARENT_SCOPE)
endfunction()
