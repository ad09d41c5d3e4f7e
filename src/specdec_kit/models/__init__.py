"""Draft/target pairs by name (hub ids, local directories, `.gguf` files, `zoo:` pairs) and the target's own greedy
decoding, which every other decoding is compared with."""
