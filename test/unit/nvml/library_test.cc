#include "nvml/library.h"

#include <algorithm>

#include <gtest/gtest.h>

#include "nvml/fabric.h"

namespace nvdra::nvml {
namespace {

std::unique_ptr<Library> OpenMinimal() {
  LibraryOptions options;
  options.library_path = NVDRA_MINIMAL_NVML_PATH;
  auto library = Library::Open(options);
  EXPECT_TRUE(library.ok()) << library.status();
  return library.ok() ? std::move(*library) : nullptr;
}

bool Lists(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

TEST(Library, MissingExportsAreListedNotFatal) {
  auto library = OpenMinimal();
  ASSERT_NE(library, nullptr);
  EXPECT_TRUE(Lists(library->MissingFunctions(), "nvmlDeviceGetCount_v2"));
  EXPECT_TRUE(Lists(library->MissingFunctions(), "nvmlDeviceGetGpuFabricInfoV"));
  EXPECT_FALSE(Lists(library->MissingFunctions(), "nvmlSystemGetDriverVersion"));
  EXPECT_EQ(library->DriverVersion().value(), "418.40");
}

TEST(Library, CallingAMissingFunctionIsUnimplementedAndNamesIt) {
  auto library = OpenMinimal();
  ASSERT_NE(library, nullptr);
  auto count = library->DeviceCount();
  ASSERT_FALSE(count.ok());
  EXPECT_TRUE(IsNotSupported(count.status()));
  EXPECT_NE(count.status().message().find("nvmlDeviceGetCount_v2"), std::string::npos);
  EXPECT_NE(count.status().message().find("not exported"), std::string::npos);
}

TEST(Library, ErrorsCarryFunctionNameAndNvmlText) {
  auto library = OpenMinimal();
  ASSERT_NE(library, nullptr);
  Status status = library->Check(abi::NVML_ERROR_GPU_IS_LOST, "nvmlDeviceGetUUID");
  EXPECT_EQ(status.code(), common::StatusCode::kUnavailable);
  EXPECT_EQ(status.message(), "nvmlDeviceGetUUID: Minimal Error (NVML error 15)");
  EXPECT_TRUE(library->Check(abi::NVML_SUCCESS, "x").ok());
}

TEST(Library, ReturnCodesMapToWhatCallersDo) {
  EXPECT_EQ(NvmlReturnToStatusCode(abi::NVML_ERROR_NOT_SUPPORTED), common::StatusCode::kUnimplemented);
  EXPECT_EQ(NvmlReturnToStatusCode(abi::NVML_ERROR_NOT_FOUND), common::StatusCode::kNotFound);
  EXPECT_EQ(NvmlReturnToStatusCode(abi::NVML_ERROR_INSUFFICIENT_RESOURCES),
            common::StatusCode::kResourceExhausted);
  EXPECT_EQ(NvmlReturnToStatusCode(abi::NVML_ERROR_IN_USE), common::StatusCode::kFailedPrecondition);
  EXPECT_EQ(NvmlReturnToStatusCode(abi::NVML_ERROR_NO_PERMISSION), common::StatusCode::kPermissionDenied);
  EXPECT_EQ(NvmlReturnToStatusCode(abi::NVML_ERROR_UNKNOWN), common::StatusCode::kInternal);
}

TEST(Library, NodeWithoutFabricCallsHasNoCliqueButDeviceCountFails) {
  auto library = OpenMinimal();
  ASSERT_NE(library, nullptr);
  // Without nvmlDeviceGetCount_v2 there is no way to enumerate GPUs: an error,
  // not a silent empty node.
  EXPECT_FALSE(NodeCliqueId(*library, {}).ok());
}

TEST(Library, NotALibraryIsAClearError) {
  LibraryOptions options;
  options.library_path = "/etc/hostname";
  auto library = Library::Open(options);
  ASSERT_FALSE(library.ok());
  EXPECT_EQ(library.status().code(), common::StatusCode::kNotFound);
  EXPECT_NE(library.status().message().find("/etc/hostname"), std::string::npos);
}

}  // namespace
}  // namespace nvdra::nvml
