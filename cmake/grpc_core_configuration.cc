// gRPC core's plugin registry cut down to what our gRPC needs: servers and
// clients over unix sockets (the kubelet's registration and DRA sockets; our
// tests' clients), plus plain DNS/IP targets.
//
// Why: grpc_init() builds its CoreConfiguration by calling
// grpc_core::BuildCoreConfiguration, which gRPC's own grpc_plugin_registry.cc
// defines to register every LB policy (grpclb, RLS, ring hash, priority,
// outlier detection, weighted target, round robin), the c-ares resolver, the
// fake resolver, the HTTP proxy mapper and fault injection. Linked
// statically (cmake/StaticGrpc.cmake), each registration pulls its code into
// the binary, and on this kernel a binary's code is resident almost whole
// (bench/README.md, "Where the plugin's RSS goes"). Defining the function
// here, in an object linked before gRPC's archives, keeps the linker from
// ever pulling gRPC's registry object, and with it the code that only the
// registry references.
//
// What stays, in gRPC's own order (the order of the handshakers and of the
// channel-init stages matters): event-engine channel args, the TCP and HTTP
// CONNECT handshakers, pick_first (the default policy), the client channel,
// the security handshakers and auth filters (insecure credentials still go
// through them), client authority, idle/max-age, HTTP, deadline, message size
// and service-config-arg filters, the resource quota, the native DNS and
// sockaddr (unix:, unix-abstract:, ipv4:, ipv6:) resolvers, and the
// built-ins. What a service config or target naming a dropped policy or
// scheme gets is gRPC's own error for an unknown one.
//
// The Register* functions are gRPC-internal (src/core of gRPC 1.51, Debian
// bookworm's libgrpc-dev): the names below are that version's, checked
// against the archive's grpc_plugin_registry.cc.o; StaticGrpc.cmake enables
// this file for that version only. Only pointers to the builder are passed,
// so an incomplete declaration is all that is needed.

namespace grpc_core {
class CoreConfiguration {
 public:
  class Builder;
};

void BuildCoreConfiguration(CoreConfiguration::Builder* builder);

void RegisterHttpConnectHandshaker(CoreConfiguration::Builder* builder);
void RegisterTCPConnectHandshaker(CoreConfiguration::Builder* builder);
void RegisterPickFirstLbPolicy(CoreConfiguration::Builder* builder);
void BuildClientChannelConfiguration(CoreConfiguration::Builder* builder);
void SecurityRegisterHandshakerFactories(CoreConfiguration::Builder* builder);
void RegisterClientAuthorityFilter(CoreConfiguration::Builder* builder);
void RegisterChannelIdleFilters(CoreConfiguration::Builder* builder);
void RegisterHttpFilters(CoreConfiguration::Builder* builder);
void RegisterDeadlineFilter(CoreConfiguration::Builder* builder);
void RegisterMessageSizeFilter(CoreConfiguration::Builder* builder);
void RegisterServiceConfigChannelArgFilter(CoreConfiguration::Builder* builder);
void RegisterResourceQuota(CoreConfiguration::Builder* builder);
void RegisterNativeDnsResolver(CoreConfiguration::Builder* builder);
void RegisterSockaddrResolver(CoreConfiguration::Builder* builder);
void RegisterSecurityFilters(CoreConfiguration::Builder* builder);
void RegisterExtraFilters(CoreConfiguration::Builder* builder);
void RegisterBuiltins(CoreConfiguration::Builder* builder);
}  // namespace grpc_core

namespace grpc_event_engine::experimental {
void RegisterEventEngineChannelArgPreconditioning(grpc_core::CoreConfiguration::Builder* builder);
}  // namespace grpc_event_engine::experimental

void grpc_core::BuildCoreConfiguration(CoreConfiguration::Builder* builder) {
  grpc_event_engine::experimental::RegisterEventEngineChannelArgPreconditioning(builder);
  RegisterHttpConnectHandshaker(builder);
  RegisterTCPConnectHandshaker(builder);
  RegisterPickFirstLbPolicy(builder);
  BuildClientChannelConfiguration(builder);
  SecurityRegisterHandshakerFactories(builder);
  RegisterClientAuthorityFilter(builder);
  RegisterChannelIdleFilters(builder);
  RegisterHttpFilters(builder);
  RegisterDeadlineFilter(builder);
  RegisterMessageSizeFilter(builder);
  RegisterServiceConfigChannelArgFilter(builder);
  RegisterResourceQuota(builder);
  RegisterNativeDnsResolver(builder);
  RegisterSockaddrResolver(builder);
  RegisterSecurityFilters(builder);
  RegisterExtraFilters(builder);
  RegisterBuiltins(builder);
}
