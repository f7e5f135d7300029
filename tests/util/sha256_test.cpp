#include <string>

#include <doctest/doctest.h>

#include "util/sha256.hpp"

using redlock::util::sha256_hex;

// FIPS 180-4's examples and Python's hashlib.sha256 of the same input.
TEST_CASE("sha256_hex gives the standard digests") {
    CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    CHECK(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
          "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST_CASE("sha256_hex pads at every block boundary and reads high bytes as unsigned") {
    // 55 bytes fit one block with the padding, 56 need two, 64 fill one exactly.
    CHECK(sha256_hex(std::string(55, 'a')) ==
          "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
    CHECK(sha256_hex(std::string(56, 'a')) ==
          "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
    CHECK(sha256_hex(std::string(64, 'a')) ==
          "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
    std::string kilobyte(1024, '\0');
    for (size_t i = 0; i < kilobyte.size(); ++i)
        kilobyte[i] = static_cast<char>(static_cast<unsigned char>((i * 7 + 3) % 256));
    CHECK(sha256_hex(kilobyte) ==
          "e9183d9a79aad8a047b8e67981210d50b01fc75b1edba5bc32ba3d3ec4d5056d");
}
