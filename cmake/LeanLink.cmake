# nvdra_lean_link(<target>): links an executable (or a shared object that
# exports a C API only, as the mock NVML) for a small resident size:
# - libstdc++ and libgcc statically (NVDRA_STATIC_CXX_RUNTIME). Only for
#   binaries that load no C++ shared object (each would bring the shared
#   libstdc++ back, with a second copy of its globals), so not by default.
#   Not with the sanitizers,
#   whose runtimes expect the shared libstdc++.
# - --gc-sections (NVDRA_GC_SECTIONS): drops the sections nothing refers to.
#   libstdc++.a is compiled one section per function, so this removes most of
#   what its objects bring but the binary never calls; gRPC's and abseil's
#   archives are not (only their unused inline and template copies go), nor
#   is our code: compiling it with -ffunction-sections -fdata-sections took
#   another 400 KB of code out of the gpu-kubelet-plugin but no resident
#   memory (that code was never faulted in), for a full rebuild of every
#   object, so it is not done.
# On this kernel most of a binary's code mapping is resident (92 % for the
# gpu-kubelet-plugin: the page cache maps large folios around each fault;
# bench/README.md, "Where the plugin's RSS goes"), so what is not linked is
# mostly what is saved; whole stretches of code that never run are the
# exception, as above.
# Off by default: the plugins' metrics endpoint is cpp-httplib, which Debian
# ships only as a C++ shared object (a hand-written HTTP server in its place
# was measured at -1.1 MiB resident and not kept: we do not write our own
# HTTP; bench/README.md).
option(NVDRA_STATIC_CXX_RUNTIME "Link libstdc++ and libgcc statically into the kubelet plugins" OFF)
option(NVDRA_GC_SECTIONS "Link the kubelet plugins with --gc-sections" ON)

function(nvdra_lean_link target)
  if(NVDRA_STATIC_CXX_RUNTIME AND NOT NVDRA_SANITIZE)
    target_link_options(${target} PRIVATE -static-libstdc++ -static-libgcc)
  endif()
  if(NVDRA_GC_SECTIONS)
    target_link_options(${target} PRIVATE LINKER:--gc-sections)
  endif()
endfunction()

