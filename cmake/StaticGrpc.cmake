# nvdra::grpcpp and nvdra::protobuf: the gRPC C++ and protobuf libraries our
# kubelet-facing servers link (third_party/kubelet-apis, src/kubeletplugin).
#
# With NVDRA_STATIC_GRPC (the default) they are Debian's static archives:
# grpc++_unsecure/grpc_unsecure (our gRPC only ever serves and dials unix
# sockets, so the TLS credentials of the secure build are never used), upb,
# gpr, address_sorting, c-ares, re2, protobuf-lite and abseil, linked into
# the binary. Why: loaded as ~60 shared objects they cost the
# gpu-kubelet-plugin ~5 MiB of resident memory (each library's relocated
# data and GOT, the symbol tables read to bind it, and the code pages faulted
# in around every function used, spread over five large libraries); linked
# statically only the objects the program references are in it, bound at
# link time (bench/README.md, "GPU kubelet plugin", has the per-mapping
# figures). Off: Debian's shared gRPC::grpc++ and protobuf-lite.
#
# Either way every target of the project links the same flavour, so no
# process ever holds two copies of protobuf's or gRPC's globals.
#
# zlib stays shared: libcurl loads libz.so into every process anyway.

option(NVDRA_STATIC_GRPC "Link gRPC (unsecure), protobuf and abseil statically" ON)

# Libraries with a static archive that stay shared (see above) or that are
# part of the C runtime.
set(_nvdra_keep_shared z dl m rt pthread atomic)

# Static archive for a shared library path or a -l name, or "" when Debian
# ships none.
function(_nvdra_static_archive item out_var)
  set(_archive "")
  if(item MATCHES "^-l(.+)$")
    set(_name "${CMAKE_MATCH_1}")
    if(NOT _name IN_LIST _nvdra_keep_shared)
      find_file(_found NAMES lib${_name}.a PATHS ${CMAKE_SYSTEM_LIBRARY_PATH} /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}
                NO_DEFAULT_PATH NO_CACHE)
      if(_found)
        set(_archive "${_found}")
      endif()
    endif()
  elseif(item MATCHES "^(.*)/lib([^/]+)\\.so(\\.[0-9.]+)?$")
    set(_name "${CMAKE_MATCH_2}")
    if(EXISTS "${CMAKE_MATCH_1}/lib${_name}.a" AND NOT _name IN_LIST _nvdra_keep_shared)
      set(_archive "${CMAKE_MATCH_1}/lib${_name}.a")
    endif()
  endif()
  set(${out_var} "${_archive}" PARENT_SCOPE)
endfunction()

# Walks imported target (or link item) `item` and its INTERFACE_LINK_LIBRARIES
# depth-first, appending each library's static archive (or, without one, its
# shared file or plain link item) to the caller's _nvdra_archives or
# _nvdra_others, once each.
function(_nvdra_static_closure item)
  if(item MATCHES "^\\$<")
    return()  # generator expressions in Debian's exports only guard other platforms
  endif()
  if(TARGET "${item}")
    get_property(_seen GLOBAL PROPERTY _nvdra_static_seen)
    if(item IN_LIST _seen)
      return()
    endif()
    set_property(GLOBAL APPEND PROPERTY _nvdra_static_seen "${item}")
    # Debian's exports set IMPORTED_LOCATION or IMPORTED_LOCATION_NONE.
    foreach(_prop IMPORTED_LOCATION IMPORTED_LOCATION_NONE IMPORTED_LOCATION_RELEASE)
      get_target_property(_location ${item} ${_prop})
      if(_location)
        _nvdra_static_closure("${_location}")
        break()
      endif()
    endforeach()
    foreach(_prop INTERFACE_INCLUDE_DIRECTORIES INTERFACE_COMPILE_DEFINITIONS)
      get_target_property(_value ${item} ${_prop})
      if(_value)
        set_property(GLOBAL APPEND PROPERTY _nvdra_static_${_prop} "${_value}")
      endif()
    endforeach()
    get_target_property(_deps ${item} INTERFACE_LINK_LIBRARIES)
    if(_deps)
      foreach(_dep IN LISTS _deps)
        _nvdra_static_closure("${_dep}")
      endforeach()
    endif()
    return()
  endif()
  _nvdra_static_archive("${item}" _archive)
  if(_archive)
    set_property(GLOBAL APPEND PROPERTY _nvdra_static_archives "${_archive}")
  else()
    set_property(GLOBAL APPEND PROPERTY _nvdra_static_others "${item}")
  endif()
endfunction()

add_library(nvdra_grpcpp INTERFACE)
add_library(nvdra::grpcpp ALIAS nvdra_grpcpp)
add_library(nvdra_protobuf INTERFACE)
add_library(nvdra::protobuf ALIAS nvdra_protobuf)
if(NVDRA_STATIC_GRPC)
  _nvdra_static_closure(gRPC::grpc++_unsecure)
  _nvdra_static_closure(protobuf::libprotobuf-lite)
  get_property(_archives GLOBAL PROPERTY _nvdra_static_archives)
  get_property(_others GLOBAL PROPERTY _nvdra_static_others)
  get_property(_includes GLOBAL PROPERTY _nvdra_static_INTERFACE_INCLUDE_DIRECTORIES)
  get_property(_defines GLOBAL PROPERTY _nvdra_static_INTERFACE_COMPILE_DEFINITIONS)
  list(REMOVE_DUPLICATES _archives)
  list(REMOVE_DUPLICATES _others)
  # grpc_init's core configuration cut down to our unix-socket servers and
  # clients (cmake/grpc_core_configuration.cc says what and why). Our
  # BuildCoreConfiguration must be in the link before gRPC's archives: the
  # --undefined makes the linker take it from our archive first, so gRPC's
  # own registry object (which defines the same function) is never pulled.
  # gRPC-internal names: for Debian bookworm's 1.51 only.
  option(NVDRA_GRPC_MINIMAL_CORE "Register only the gRPC core plugins a unix-socket server and client need" ON)
  if(NVDRA_GRPC_MINIMAL_CORE AND gRPC_VERSION VERSION_GREATER_EQUAL 1.51 AND gRPC_VERSION VERSION_LESS 1.52)
    add_library(nvdra_grpc_core_configuration STATIC ${CMAKE_CURRENT_LIST_DIR}/grpc_core_configuration.cc)
    target_link_options(nvdra_grpcpp INTERFACE
      "LINKER:--undefined=_ZN9grpc_core22BuildCoreConfigurationEPNS_17CoreConfiguration7BuilderE")
    target_link_libraries(nvdra_grpcpp INTERFACE nvdra_grpc_core_configuration)
  elseif(NVDRA_GRPC_MINIMAL_CORE)
    message(STATUS "gRPC ${gRPC_VERSION}: not 1.51, linking gRPC's full core configuration")
  endif()
  # abseil's and gRPC's archives refer to one another in both directions
  # (gpr <-> absl, grpc <-> upb); one link group resolves every order.
  string(JOIN "," _group ${_archives})
  target_link_libraries(nvdra_grpcpp INTERFACE "-Wl,--start-group,${_group},--end-group" ${_others})
  if(_includes)
    list(REMOVE_DUPLICATES _includes)
    target_include_directories(nvdra_grpcpp SYSTEM INTERFACE ${_includes})
  endif()
  if(_defines)
    list(REMOVE_DUPLICATES _defines)
    target_compile_definitions(nvdra_grpcpp INTERFACE ${_defines})
  endif()
  # The generated messages need protobuf-lite only, which is in the group.
  target_link_libraries(nvdra_protobuf INTERFACE nvdra_grpcpp)
else()
  target_link_libraries(nvdra_grpcpp INTERFACE gRPC::grpc++)
  target_link_libraries(nvdra_protobuf INTERFACE protobuf::libprotobuf-lite)
endif()
