// Plugin versions for the whole project; the module applies them (tessera/build.gradle.kts).
plugins {
    id("com.android.library") version "8.7.3" apply false
    id("org.jetbrains.kotlin.android") version "2.1.0" apply false
}
