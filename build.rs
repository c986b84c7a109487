//! napi-rs build setup (link flags for a Node addon).

fn main() {
    napi_build::setup();
}
