// The Tessera Android library as a Gradle project: one module, :tessera (an Android library, AAR).
// Open this folder in Android Studio, or include the module from an app's settings.gradle.kts.
// Not built on the host that wrote it (no Android SDK, NDK or Gradle there); see README.md.
pluginManagement {
    repositories {
        google()
        mavenCentral()
        gradlePluginPortal()
    }
}

dependencyResolutionManagement {
    repositoriesMode.set(RepositoriesMode.FAIL_ON_PROJECT_REPOS)
    repositories {
        google()
        mavenCentral()
    }
}

rootProject.name = "tessera-android"
include(":tessera")
