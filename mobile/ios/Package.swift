// swift-tools-version:5.9
// The Tessera Swift package: a Swift API (Sources/Tessera) over runtime-native's C API (tessera.h, the
// CTessera module). The library itself comes from Tessera.xcframework, which scripts/build-xcframework.sh
// builds on a Mac (device, Simulator and macOS slices, Metal on).
import PackageDescription

let package = Package(
    name: "Tessera",
    platforms: [.iOS(.v15), .macOS(.v12)],
    products: [
        .library(name: "Tessera", targets: ["Tessera"]),
    ],
    targets: [
        // Static libtessera.a per slice, with cJSON and PCRE2 linked in (see the script).
        .binaryTarget(name: "TesseraBinary", path: "Tessera.xcframework"),
        // The C module: a shim header over tessera.h and its module map.
        .target(
            name: "CTessera",
            dependencies: ["TesseraBinary"],
            path: "Sources/CTessera",
            linkerSettings: [
                .linkedFramework("Metal"),
                .linkedFramework("Foundation"),
            ]
        ),
        .target(name: "Tessera", dependencies: ["CTessera"], path: "Sources/Tessera"),
    ]
)
