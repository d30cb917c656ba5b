// SHA-256 against FIPS 180-4's examples (NIST's test vectors), fed whole, a
// byte at a time and from a file.
#include "core/base/sha256.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "tests/fakes/temp_dir.h"

namespace dscore {
namespace {

const std::string kTwoBlocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";

TEST(Sha256, NistVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex(kTwoBlocks),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, PiecesGiveTheDigestOfTheWhole) {
  Sha256 sha;
  for (char c : kTwoBlocks) sha.update(&c, 1);
  EXPECT_EQ(sha.hex_digest(), sha256_hex(kTwoBlocks));
}

TEST(Sha256, AFileIsHashedAndAMissingOneNamed) {
  testing::TempDir dir("dscore_sha256");
  const std::string big(3 << 20, 'x');  // several read buffers
  const auto path = dir.write("data.bin", big);
  Result<std::string> digest = sha256_of_file(path.string());
  ASSERT_TRUE(digest.ok()) << digest.status().message();
  EXPECT_EQ(*digest, sha256_hex(big));
  Result<std::string> missing = sha256_of_file(dir.file("absent.bin"));
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("absent.bin"), std::string::npos);
}

}  // namespace
}  // namespace dscore
