// The Android library module: the Kotlin API (src/main/kotlin; plus src/androidMain/kotlin, the helpers
// that need an android.content.Context) and the native library libtessera_jni.so, built per ABI by the NDK
// from src/main/cpp/CMakeLists.txt (runtime-native plus the JNI bridge), or taken prebuilt from
// src/main/jniLibs/<abi>/ (arm64-v8a, x86_64) when they are there.
// Not built on the host that wrote it: there is no Android SDK, NDK or Gradle there. The same Kotlin and C
// sources are compiled and tested on the JVM by mobile/android/scripts/build-host.sh.
plugins {
    id("com.android.library")
    id("org.jetbrains.kotlin.android")
}

android {
    namespace = "ai.tessera"
    compileSdk = 35

    defaultConfig {
        minSdk = 26
        consumerProguardFiles("consumer-rules.pro")
        ndk {
            abiFilters += listOf("arm64-v8a", "x86_64")
        }
        externalNativeBuild {
            cmake {
                // `tessera package` points this at its own copy of runtime-native (gradle.properties).
                val runtimeNativeDir = project.findProperty("tessera.runtimeNativeDir") as String?
                if (!runtimeNativeDir.isNullOrEmpty()) {
                    arguments += "-DTESSERA_RUNTIME_NATIVE_DIR=${file(runtimeNativeDir).absolutePath}"
                }
                arguments += "-DCMAKE_BUILD_TYPE=Release"
            }
        }
    }

    // Prebuilt libraries in src/main/jniLibs/<abi>/ replace the NDK build (both would package
    // libtessera_jni.so twice).
    if (!file("src/main/jniLibs/arm64-v8a/libtessera_jni.so").exists()) {
        externalNativeBuild {
            cmake {
                path = file("src/main/cpp/CMakeLists.txt")
                version = "3.22.1"
            }
        }
    }

    sourceSets {
        getByName("main") {
            java.srcDirs("src/main/kotlin", "src/androidMain/kotlin")
            jniLibs.srcDirs("src/main/jniLibs")
        }
        // The JVM tests in src/test/kotlin need the host build of the JNI library and the models that
        // pytest compiles for them (tests/mobile/test_android_jvm.py): they run there, not under Gradle.
        getByName("test") {
            java.setSrcDirs(emptyList<String>())
        }
    }

    compileOptions {
        sourceCompatibility = JavaVersion.VERSION_17
        targetCompatibility = JavaVersion.VERSION_17
    }
}

kotlin {
    compilerOptions {
        jvmTarget.set(org.jetbrains.kotlin.gradle.dsl.JvmTarget.JVM_17)
    }
}

dependencies {
    // Flow for chat.completions.stream; the API exposes it, so apps get it too. The host build compiles
    // against kotlinx-coroutines-core-jvm 1.8 from npm's kotlin-compiler.
    api("org.jetbrains.kotlinx:kotlinx-coroutines-android:1.8.1")
}
