#include "control_client.h"

#include <charconv>
#include <cstddef>
#include <string>
#include <string_view>
#include <system_error>

#include "control_wire.h"

namespace nvdra::simmps {
namespace {

std::string_view Trim(std::string_view text) {
  const auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!text.empty() && blank(text.front())) text.remove_prefix(1);
  while (!text.empty() && blank(text.back())) text.remove_suffix(1);
  return text;
}

}  // namespace

int RunControlClient(const MpsPaths& paths, std::istream& in, std::ostream& out,
                     std::ostream& err) {
  auto connection = ConnectControlSocket(paths.control_socket());
  if (!connection.ok()) {
    err << "Cannot find MPS control daemon process\n";
    return 1;
  }
  const int fd = connection->get();
  LineReader replies(fd);
  const auto lost = [&err] {
    err << "Lost connection to the MPS control daemon\n";
    return 1;
  };

  std::string input;
  while (std::getline(in, input)) {
    const std::string_view command = Trim(input);
    if (command.empty()) continue;
    if (!SendAll(fd, std::string(command) + "\n").ok()) return lost();
    auto count_line = replies.ReadLine();
    if (!count_line.ok()) return lost();
    std::size_t count = 0;
    const auto [end, ec] =
        std::from_chars(count_line->data(), count_line->data() + count_line->size(), count);
    if (ec != std::errc() || end != count_line->data() + count_line->size()) return lost();
    for (std::size_t i = 0; i < count; ++i) {
      auto line = replies.ReadLine();
      if (!line.ok()) return lost();
      out << *line << '\n';
    }
    out.flush();
    if (command == "quit") break;  // the daemon has closed
  }
  return 0;
}

}  // namespace nvdra::simmps
