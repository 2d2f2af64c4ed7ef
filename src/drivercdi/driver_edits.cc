#include "drivercdi/driver_edits.h"

#include <elf.h>
#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "common/unique_fd.h"

namespace nvdra::drivercdi {

namespace fs = std::filesystem;
using common::StatusOr;
using kubeletplugin::CdiContainerEdits;
using kubeletplugin::CdiDeviceNode;
using kubeletplugin::CdiHook;

namespace {

// The folders nvcdi's library locator searches, relative to the driver root.
constexpr std::string_view kLibrarySearchPaths[] = {
    "/",
    "/usr/lib64",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu/nvidia/current",
    "/usr/lib/aarch64-linux-gnu/nvidia/current",
    "/lib64",
    "/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/lib/x86_64-linux-gnu/nvidia/current",
    "/lib/aarch64-linux-gnu/nvidia/current",
};
// The default PATH of nvcdi's executable locator.
constexpr std::string_view kBinarySearchPaths[] = {"/usr/local/sbin", "/usr/local/bin",
                                                   "/usr/sbin",       "/usr/bin",
                                                   "/sbin",           "/bin"};
constexpr std::string_view kDriverBinaries[] = {
    "nvidia-smi",          "nvidia-debugdump",       "nvidia-persistenced",
    "nvidia-cuda-mps-control", "nvidia-cuda-mps-server", "nvidia-imex",
    "nvidia-imex-ctl"};
// Order as nvcdi's control device discoverer.
constexpr std::string_view kControlDevices[] = {"/dev/nvidia-modeset", "/dev/nvidia-uvm-tools",
                                                "/dev/nvidia-uvm", "/dev/nvidiactl"};

const std::vector<std::string> kReadOnlyMountOptions = {"ro", "nosuid", "nodev", "rbind",
                                                        "rprivate"};
const std::vector<std::string> kIpcMountOptions = {"nosuid", "nodev", "rbind", "rprivate",
                                                   "noexec"};

// <root>/<path>, for an absolute `path` in the root's view.
fs::path InRoot(const fs::path& root, std::string_view path) {
  return (root / fs::path(path).relative_path()).lexically_normal();
}

bool IsUnder(const fs::path& path, const fs::path& root) {
  const std::string p = path.lexically_normal().string();
  std::string r = root.lexically_normal().string();
  if (r == "/") return !p.empty() && p.front() == '/';
  if (r.ends_with('/')) r.pop_back();
  return p == r || (p.starts_with(r) && p[r.size()] == '/');
}

// `path` (this process's view, under `root`) as the root's own view.
std::string RelativeToRoot(const fs::path& path, const fs::path& root) {
  if (root.lexically_normal() == "/" || !IsUnder(path, root)) return path.string();
  return (fs::path("/") / path.lexically_normal().lexically_relative(root.lexically_normal()))
      .lexically_normal()
      .string();
}

std::vector<fs::path> Glob(const fs::path& pattern) {
  std::vector<fs::path> out;
  glob_t g{};
  if (::glob(pattern.c_str(), 0, nullptr, &g) == 0) {
    for (std::size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  }
  ::globfree(&g);
  return out;
}

bool IsNonDirectory(const fs::path& p) {
  std::error_code ec;
  const auto st = fs::status(p, ec);
  return !ec && fs::exists(st) && !fs::is_directory(st);
}

bool IsSymlink(const fs::path& p) {
  std::error_code ec;
  return fs::is_symlink(fs::symlink_status(p, ec));
}

std::optional<fs::path> Resolve(const fs::path& p) {
  std::error_code ec;
  fs::path r = fs::canonical(p, ec);
  if (ec) return std::nullopt;
  return r;
}

// DT_SONAME of a 64-bit little-endian ELF file; nullopt when `path` is not
// one or has none. Reads only the headers and the dynamic string table.
std::optional<std::string> ReadElfSoname(const fs::path& path) {
  common::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return std::nullopt;
  auto read_at = [&](void* buf, std::size_t size, std::uint64_t offset) {
    return ::pread(fd.get(), buf, size, static_cast<off_t>(offset)) ==
           static_cast<ssize_t>(size);
  };
  Elf64_Ehdr eh{};
  if (!read_at(&eh, sizeof(eh), 0) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
      eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB ||
      eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum > 4096) {
    return std::nullopt;
  }
  std::vector<Elf64_Phdr> phdrs(eh.e_phnum);
  if (!read_at(phdrs.data(), phdrs.size() * sizeof(Elf64_Phdr), eh.e_phoff)) return std::nullopt;
  // Virtual address to file offset, through the PT_LOAD segments.
  auto to_offset = [&](std::uint64_t vaddr) -> std::optional<std::uint64_t> {
    for (const auto& ph : phdrs) {
      if (ph.p_type == PT_LOAD && vaddr >= ph.p_vaddr && vaddr < ph.p_vaddr + ph.p_filesz) {
        return ph.p_offset + (vaddr - ph.p_vaddr);
      }
    }
    return std::nullopt;
  };
  for (const auto& ph : phdrs) {
    if (ph.p_type != PT_DYNAMIC || ph.p_filesz > (1U << 20)) continue;
    std::vector<Elf64_Dyn> dyn(ph.p_filesz / sizeof(Elf64_Dyn));
    if (!read_at(dyn.data(), dyn.size() * sizeof(Elf64_Dyn), ph.p_offset)) return std::nullopt;
    std::optional<std::uint64_t> strtab;
    std::optional<std::uint64_t> soname;
    for (const auto& d : dyn) {
      if (d.d_tag == DT_NULL) break;
      if (d.d_tag == DT_STRTAB) strtab = d.d_un.d_ptr;
      if (d.d_tag == DT_SONAME) soname = d.d_un.d_val;
    }
    if (!strtab || !soname) return std::nullopt;
    const auto base = to_offset(*strtab);
    if (!base) return std::nullopt;
    std::string name(256, '\0');
    const ssize_t n = ::pread(fd.get(), name.data(), name.size(),
                              static_cast<off_t>(*base + *soname));
    if (n <= 0) return std::nullopt;
    name.resize(static_cast<std::size_t>(n));
    name.resize(std::min(name.find('\0'), name.size()));
    return name;
  }
  return std::nullopt;
}

// The soname of a library: its DT_SONAME, or (for files that are not ELF,
// such as test placeholders) the name of a symlink beside it pointing at it
// by name, as driver installs lay out; the file name when neither is found.
std::string Soname(const fs::path& library) {
  if (auto soname = ReadElfSoname(library)) return *soname;
  const std::string name = library.filename().string();
  std::error_code ec;
  std::vector<std::string> candidates;
  for (const auto& entry : fs::directory_iterator(library.parent_path(), ec)) {
    if (!IsSymlink(entry.path())) continue;
    std::error_code rec;
    if (fs::read_symlink(entry.path(), rec).filename() == name) {
      candidates.push_back(entry.path().filename().string());
    }
  }
  // The longest link is the soname (libcuda.so.1 rather than libcuda.so).
  std::sort(candidates.begin(), candidates.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  for (const auto& c : candidates) {
    if (c != name && c.find(".so.") != std::string::npos) return c;
  }
  return name;
}

// "libfoo.so.1.2" -> "libfoo.so"; "" without a ".so" suffix part.
std::string SoLink(std::string name) {
  while (true) {
    const auto dot = name.rfind('.');
    if (dot == std::string::npos || dot == 0) return "";
    if (name.substr(dot) == ".so") return name;
    name.resize(dot);
  }
}

// fnmatch-free check of "<prefix>.*.*" (nvcdi's isDriverLibrary with version "*.*").
bool HasVersionSuffix(std::string_view filename, std::string_view prefix) {
  if (!filename.starts_with(prefix) || filename.size() <= prefix.size() ||
      filename[prefix.size()] != '.') {
    return false;
  }
  const auto rest = filename.substr(prefix.size() + 1);
  return rest.find('.') != std::string_view::npos;
}

// nvcdi's isLibName: "lib?*.so*" whose part after the last ".so" is empty or
// starts with '.'.
bool IsLibName(std::string_view base) {
  if (!base.starts_with("lib") || base.size() < 7) return false;
  const auto so = base.rfind(".so");
  if (so == std::string_view::npos || so < 4) return false;
  const auto tail = base.substr(so + 3);
  return tail.empty() || tail.front() == '.';
}

CdiHook MakeHook(const std::string& hook_path, std::string_view name,
                 const std::vector<std::string>& args) {
  CdiHook hook;
  hook.hook_name = std::string(kubeletplugin::kCdiCreateContainerHook);
  hook.path = hook_path;
  const std::string base = fs::path(hook_path).filename().string();
  hook.args.push_back(base);
  if (base == "nvidia-ctk") hook.args.emplace_back("hook");
  hook.args.emplace_back(name);
  hook.args.insert(hook.args.end(), args.begin(), args.end());
  hook.env = {"NVIDIA_CTK_DEBUG=false"};
  return hook;
}

// A device node at `container_path`, looked up under `dev_root`; host_path
// is the located file in this process's view (ToHostPaths maps it).
CdiDeviceNode DeviceNodeAt(std::string_view container_path, const fs::path& dev_root) {
  CdiDeviceNode node;
  node.path = std::string(container_path);
  const fs::path located = InRoot(dev_root, container_path);
  node.host_path = located.string();
  struct stat st {};
  if (::stat(located.c_str(), &st) == 0 && S_ISCHR(st.st_mode)) {
    node.type = "c";
    node.major = static_cast<std::int64_t>(major(st.st_rdev));
    node.minor = static_cast<std::int64_t>(minor(st.st_rdev));
    node.file_mode = static_cast<std::uint32_t>(st.st_mode & 07777);
    if (st.st_gid != 0) node.gid = st.st_gid;
  }
  return node;
}

fs::path EffectiveDevRoot(const DriverRoots& roots) {
  return roots.dev_root.empty() ? DevRootFor(roots.container_driver_root) : roots.dev_root;
}

std::string MapPath(const std::string& path, const DriverRoots& roots) {
  if (path.empty() || !IsUnder(path, roots.container_driver_root)) return path;
  const fs::path rel =
      fs::path(path).lexically_normal().lexically_relative(
          roots.container_driver_root.lexically_normal());
  fs::path out = roots.host_driver_root / rel;
  std::string s = out.lexically_normal().string();
  if (s.size() > 1 && s.ends_with('/')) s.pop_back();
  return s;
}

}  // namespace

fs::path DevRootFor(const fs::path& container_driver_root) {
  std::error_code ec;
  if (fs::is_directory(container_driver_root / "dev", ec)) return container_driver_root;
  return "/";
}

StatusOr<CdiContainerEdits> BuildCommonEdits(const CommonEditsOptions& options) {
  if (options.driver_version.empty()) {
    return common::InvalidArgumentError("common CDI edits: driver version is empty");
  }
  if (options.hook_path.empty()) {
    return common::InvalidArgumentError("common CDI edits: nvidia-cdi-hook path is empty");
  }
  const fs::path& root = options.roots.container_driver_root;
  const std::string& version = options.driver_version;

  // The driver's library folder: where libcuda.so.<version> (or, on nodes
  // without CUDA, libnvidia-ml.so.<version>) resolves to.
  std::optional<fs::path> lib_dir;
  for (std::string_view lib : {"libcuda.so.", "libnvidia-ml.so."}) {
    for (std::string_view dir : kLibrarySearchPaths) {
      const fs::path candidate = InRoot(root, dir) / fmt::format("{}{}", lib, version);
      if (!IsNonDirectory(candidate)) continue;
      if (auto resolved = Resolve(candidate)) {
        lib_dir = resolved->parent_path();
        break;
      }
    }
    if (lib_dir) break;
  }
  if (!lib_dir) {
    return common::NotFoundError(fmt::format(
        "common CDI edits: no libcuda.so.{0} or libnvidia-ml.so.{0} under {1}", version,
        root.string()));
  }

  CdiContainerEdits edits;
  edits.env.push_back("NVIDIA_VISIBLE_DEVICES=void");
  edits.env.push_back("NVIDIA_CTK_LIBCUDA_DIR=" + RelativeToRoot(*lib_dir, root));

  const fs::path dev_root = EffectiveDevRoot(options.roots);
  for (std::string_view dev : kControlDevices) {
    std::error_code ec;
    if (fs::exists(InRoot(dev_root, dev), ec)) edits.device_nodes.push_back(DeviceNodeAt(dev, dev_root));
  }

  // Driver libraries, symlinks resolved, each once.
  std::vector<fs::path> libraries;
  std::set<fs::path> seen;
  for (const fs::path& dir : {*lib_dir, *lib_dir / "vdpau"}) {
    for (const auto& match : Glob(dir / fmt::format("*.so.{}", version))) {
      if (!IsNonDirectory(match)) continue;
      auto resolved = Resolve(match);
      if (resolved && seen.insert(*resolved).second) libraries.push_back(*resolved);
    }
  }
  for (const auto& lib : libraries) {
    edits.mounts.push_back({lib.string(), RelativeToRoot(lib, root), "", kReadOnlyMountOptions});
  }
  const std::size_t library_mounts = edits.mounts.size();

  // IPC sockets (first of /run, /var/run) and the MPS pipe folder.
  for (std::string_view socket : {"nvidia-persistenced/socket", "nvidia-fabricmanager/socket"}) {
    for (std::string_view run : {"/run", "/var/run"}) {
      const fs::path p = InRoot(root, run) / socket;
      std::error_code ec;
      if (fs::exists(p, ec)) {
        edits.mounts.push_back({p.string(), RelativeToRoot(p, root), "", kIpcMountOptions});
        break;
      }
    }
  }
  {
    const fs::path mps = InRoot(root, "/tmp/nvidia-mps");
    std::error_code ec;
    if (fs::exists(mps, ec)) {
      edits.mounts.push_back({mps.string(), RelativeToRoot(mps, root), "", kIpcMountOptions});
    }
  }

  // GSP firmware.
  for (std::string_view dir : {"/lib/firmware/updates", "/lib/firmware"}) {
    for (const auto& fw : Glob(InRoot(root, dir) / "nvidia" / version / "gsp*.bin")) {
      if (!IsNonDirectory(fw)) continue;
      edits.mounts.push_back({fw.string(), RelativeToRoot(fw, root), "", kReadOnlyMountOptions});
    }
  }

  // Binaries: the first executable file of each name.
  for (std::string_view bin : kDriverBinaries) {
    for (std::string_view dir : kBinarySearchPaths) {
      const fs::path p = InRoot(root, dir) / bin;
      struct stat st {};
      if (::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0111) != 0) {
        edits.mounts.push_back({p.string(), RelativeToRoot(p, root), "", kReadOnlyMountOptions});
        break;
      }
    }
  }

  // create-symlinks: the links a driver install has beside each library,
  // recreated in the container (bind mounts carry files, not their links).
  std::vector<std::string> links;
  std::set<std::string> seen_links;
  auto add_link = [&](std::string link) {
    if (seen_links.insert(link).second) links.push_back(std::move(link));
  };
  for (std::size_t i = 0; i < library_mounts; ++i) {
    const fs::path host(edits.mounts[i].host_path);
    const fs::path container(edits.mounts[i].container_path);
    const std::string filename = container.filename().string();
    const fs::path cdir = container.parent_path();
    if (HasVersionSuffix(filename, "libcuda.so")) {
      add_link(fmt::format("libcuda.so.1::{}", (cdir / "libcuda.so").string()));
    } else if (HasVersionSuffix(filename, "libGLX_nvidia.so")) {
      add_link(fmt::format("{}::{}", filename, (cdir / "libGLX_indirect.so.0").string()));
    } else if (HasVersionSuffix(filename, "libnvidia-opticalflow.so")) {
      add_link(fmt::format("libnvidia-opticalflow.so.1::{}",
                           (cdir / "libnvidia-opticalflow.so").string()));
    }
    const std::string soname = Soname(host);
    if (soname != filename && IsSymlink(host.parent_path() / soname)) {
      add_link(fmt::format("{}::{}", filename, (cdir / soname).string()));
    }
    const std::string so_target = soname.empty() ? filename : soname;
    const std::string so_link = SoLink(so_target);
    if (!so_link.empty() && so_link != so_target && IsSymlink(host.parent_path() / so_link)) {
      add_link(fmt::format("{}::{}", so_target, (cdir / so_link).string()));
    }
  }
  if (!links.empty()) {
    std::vector<std::string> args;
    for (auto& l : links) {
      args.emplace_back("--link");
      args.push_back(std::move(l));
    }
    edits.hooks.push_back(MakeHook(options.hook_path, "create-symlinks", args));
  }

  // enable-cuda-compat before update-ldcache: the ld.so.conf.d file it may
  // write must be there when ldconfig runs.
  edits.hooks.push_back(MakeHook(options.hook_path, "enable-cuda-compat", {"--host-driver-version=" + version}));

  // update-ldcache with the library folders (container view).
  std::vector<std::string> folders;
  for (std::size_t i = 0; i < library_mounts; ++i) {
    const fs::path container(edits.mounts[i].container_path);
    if (!IsLibName(container.filename().string())) continue;
    const std::string dir = container.parent_path().string();
    if (std::find(folders.begin(), folders.end(), dir) == folders.end()) folders.push_back(dir);
  }
  std::vector<std::string> args;
  for (const auto& f : folders) {
    args.emplace_back("--folder");
    args.push_back(f);
  }
  edits.hooks.push_back(MakeHook(options.hook_path, "update-ldcache", args));
  // CUDA in the container must not create device nodes: the runtime gave it
  // the allocated ones.
  edits.hooks.push_back(MakeHook(options.hook_path, "disable-device-node-modification", {}));
  return edits;
}

fs::path ProcPaths::devices_file() const {
  return proc_devices.empty() ? proc_root / "devices" : proc_devices;
}

fs::path ProcPaths::capabilities_dir() const {
  return proc_root / "driver/nvidia/capabilities";
}

ProcPaths ProcPathsFromEnvironment() {
  ProcPaths paths;
  if (const char* alt = std::getenv("ALT_PROC_DEVICES_PATH"); alt != nullptr && *alt != '\0') {
    paths.proc_devices = alt;
    // Mock mode (upstream's variable): a fake proc tree that also holds the
    // MIG capability files is used for those too, so simulated nodes resolve
    // MIG devices without this machine's /proc/driver/nvidia.
    const fs::path fake_proc = fs::path(alt).parent_path();
    std::error_code ec;
    if (fs::is_directory(fake_proc / "driver" / "nvidia" / "capabilities", ec)) paths.proc_root = fake_proc;
  }
  return paths;
}

StatusOr<std::int64_t> ReadCharDeviceMajor(const fs::path& proc_devices, std::string_view name) {
  std::ifstream in(proc_devices);
  if (!in) return common::ErrnoToStatus(errno == 0 ? ENOENT : errno, "open " + proc_devices.string());
  std::string line;
  bool in_char = false;
  while (std::getline(in, line)) {
    if (line.starts_with("Character devices:")) {
      in_char = true;
      continue;
    }
    if (line.starts_with("Block devices:")) break;
    if (!in_char) continue;
    std::istringstream fields(line);
    std::int64_t number = 0;
    std::string dev_name;
    if (fields >> number >> dev_name && dev_name == name) return number;
  }
  return common::NotFoundError(
      fmt::format("{}: no character device {:?}", proc_devices.string(), name));
}

StatusOr<NvCapDeviceInfo> ParseNvCapFile(const fs::path& file) {
  std::ifstream in(file);
  if (!in) return common::ErrnoToStatus(errno == 0 ? ENOENT : errno, "open " + file.string());
  NvCapDeviceInfo info;
  bool have_minor = false;
  std::string line;
  while (std::getline(in, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = line.substr(0, colon);
    const std::string value = line.substr(colon + 1);
    char* end = nullptr;
    const long long n = std::strtoll(value.c_str(), &end, 10);
    if (end == value.c_str()) continue;
    if (key == "DeviceFileMinor") {
      info.minor = n;
      have_minor = true;
    } else if (key == "DeviceFileMode") {
      info.mode = static_cast<std::uint32_t>(n);
    }
  }
  if (!have_minor) {
    return common::InvalidArgumentError(file.string() + ": no DeviceFileMinor");
  }
  return info;
}

CdiContainerEdits FullGpuEdits(unsigned minor, const DriverRoots& roots) {
  CdiContainerEdits edits;
  edits.device_nodes.push_back(
      DeviceNodeAt(fmt::format("/dev/nvidia{}", minor), EffectiveDevRoot(roots)));
  return edits;
}

StatusOr<CdiContainerEdits> MigDeviceEdits(unsigned parent_minor, unsigned gi_id, unsigned ci_id,
                                           const DriverRoots& roots, const ProcPaths& proc) {
  ASSIGN_OR_RETURN(const std::int64_t caps_major,
                   ReadCharDeviceMajor(proc.devices_file(), "nvidia-caps"));
  const fs::path gi_dir =
      proc.capabilities_dir() / fmt::format("gpu{}/mig/gi{}", parent_minor, gi_id);
  ASSIGN_OR_RETURN(const NvCapDeviceInfo gi, ParseNvCapFile(gi_dir / "access"));
  ASSIGN_OR_RETURN(const NvCapDeviceInfo ci,
                   ParseNvCapFile(gi_dir / fmt::format("ci{}", ci_id) / "access"));
  CdiContainerEdits edits = FullGpuEdits(parent_minor, roots);
  for (const auto& cap : {gi, ci}) edits.device_nodes.push_back(CapDeviceNode(caps_major, cap));
  return edits;
}

CdiDeviceNode CapDeviceNode(std::int64_t caps_major, const NvCapDeviceInfo& cap) {
  CdiDeviceNode node;
  node.path = fmt::format("/dev/nvidia-caps/nvidia-cap{}", cap.minor);
  node.type = "c";
  node.major = caps_major;
  node.minor = cap.minor;
  node.file_mode = cap.mode;
  return node;
}

void ToHostPaths(CdiContainerEdits& edits, const DriverRoots& roots) {
  for (auto& dn : edits.device_nodes) {
    if (dn.host_path.empty()) dn.host_path = dn.path;
    dn.host_path = MapPath(dn.host_path, roots);
  }
  for (auto& m : edits.mounts) m.host_path = MapPath(m.host_path, roots);
  for (auto& h : edits.hooks) {
    if (h.hook_name != "startContainer") h.path = MapPath(h.path, roots);
    if (h.hook_name == "createContainer" || h.hook_name == "startContainer") continue;
    for (auto& arg : h.args) {
      const auto sep = arg.find("::");
      if (sep == std::string::npos) {
        arg = MapPath(arg, roots);
      } else {
        arg = MapPath(arg.substr(0, sep), roots) + "::" + MapPath(arg.substr(sep + 2), roots);
      }
    }
  }
}

kubeletplugin::CdiSpec BuildClaimSpec(std::string_view vendor, std::string_view claim_uid,
                                      const CdiContainerEdits& common,
                                      const std::vector<ClaimCdiDevice>& devices,
                                      const DriverRoots& roots) {
  kubeletplugin::CdiSpec spec;
  spec.kind = kubeletplugin::CdiKind(vendor, kubeletplugin::kCdiClaimClass);
  spec.container_edits = common;
  ToHostPaths(spec.container_edits, roots);
  for (const auto& d : devices) {
    kubeletplugin::CdiDevice device;
    device.name = kubeletplugin::ClaimCdiDeviceName(claim_uid, d.canonical_name);
    device.container_edits = d.edits;
    ToHostPaths(device.container_edits, roots);
    spec.devices.push_back(std::move(device));
  }
  return spec;
}

}  // namespace nvdra::drivercdi
