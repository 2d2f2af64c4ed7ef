# nvdra_lean_link(<target>): links an executable (or a shared object that
# exports a C API only, as the mock NVML) for a small resident size:
# - libstdc++ and libgcc statically (NVDRA_STATIC_CXX_RUNTIME, default on).
#   Only for binaries that load no C++ shared object (each would bring the
#   shared libstdc++ back, with a second copy of its globals): so only when
#   cpp-httplib, the one C++ library Debian ships shared-only, is our static
#   build (cmake/StaticHttplib.cmake). Not with the sanitizers, whose
#   runtimes expect the shared libstdc++.
# - --gc-sections (NVDRA_GC_SECTIONS): drops the sections nothing refers to.
#   libstdc++.a is compiled one section per function, so this removes most of
#   what its objects bring but the binary never calls; gRPC's and abseil's
#   archives are not (only their unused inline and template copies go), nor
#   is our code: compiling it with -ffunction-sections -fdata-sections took
#   another 400 KB of code out of the gpu-kubelet-plugin but no resident
#   memory (that code was never faulted in), for a full rebuild of every
#   object, so it is not done.
# - -z pack-relative-relocs (when the linker and glibc support it: binutils
#   2.38, glibc 2.36): the relative relocations of a position-independent
#   executable packed as DT_RELR, a few KB instead of the 0.7 MB .rela.dyn the
#   dynamic loader reads at every start (the statically linked libraries,
#   OpenSSL's tables above all, carry many pointers).
# On this kernel most of a binary's code mapping is resident (92 % for the
# gpu-kubelet-plugin: the page cache maps large folios around each fault;
# bench/README.md, "Where the plugin's RSS goes"), so what is not linked is
# mostly what is saved; whole stretches of code that never run are the
# exception, as above.
option(NVDRA_STATIC_CXX_RUNTIME "Link libstdc++ and libgcc statically into the kubelet plugins" ON)
option(NVDRA_GC_SECTIONS "Link the kubelet plugins with --gc-sections" ON)
# Included after cmake/StaticHttplib.cmake, which says whether ours is linked.
set(NVDRA_STATIC_CXX_RUNTIME_IN_USE FALSE)
if(NVDRA_STATIC_CXX_RUNTIME AND NVDRA_STATIC_HTTPLIB_IN_USE AND NOT NVDRA_SANITIZE)
  set(NVDRA_STATIC_CXX_RUNTIME_IN_USE TRUE)
endif()

include(CheckLinkerFlag)
check_linker_flag(CXX "LINKER:-z,pack-relative-relocs" NVDRA_LINKER_HAS_RELR)

function(nvdra_lean_link target)
  if(NVDRA_STATIC_CXX_RUNTIME_IN_USE)
    target_link_options(${target} PRIVATE -static-libstdc++ -static-libgcc)
  endif()
  if(NVDRA_GC_SECTIONS)
    target_link_options(${target} PRIVATE LINKER:--gc-sections)
  endif()
  if(NVDRA_LINKER_HAS_RELR)
    target_link_options(${target} PRIVATE LINKER:-z,pack-relative-relocs)
  endif()
endfunction()

