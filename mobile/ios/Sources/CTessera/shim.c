/* SwiftPM builds a C target from at least one source file; the code itself is in Tessera.xcframework. */
