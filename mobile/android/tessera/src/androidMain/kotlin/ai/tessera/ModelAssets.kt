package ai.tessera

import android.content.Context
import java.io.File
import java.io.IOException

/**
 * Models shipped in an app's assets (`tessera package --target android` puts them under
 * assets/<name>/). The runtime reads a real folder (it maps the weights' shards and opens the kernels by
 * path), and an APK's assets are not one, so the model is copied once to the app's files folder.
 */
object ModelAssets {
    private const val STAMP_FILE = ".tessera-asset-stamp"

    /**
     * Copies assets/<name>/ (or only its [build] folder, assets/<name>/<build>/, such as "vulkan") to the
     * same path under <filesDir>/tessera-models/ when it is missing there or came from an older install of
     * the app, and returns that folder's path, for Engine.load or Module.load. Copying one build saves the
     * phone's storage: `tessera package` writes several, each with its own weights. Slow the first time
     * (the model is copied): call it off the main thread.
     *
     * The copy is made in a side folder and renamed into place when complete, then stamped with the APK's
     * size and time, so an interrupted copy is made again and an app update brings its new model.
     */
    @JvmStatic
    @JvmOverloads
    fun install(context: Context, name: String, build: String? = null): String {
        val assetPath = if (build == null) name else "$name/$build"
        val target = File(File(context.filesDir, "tessera-models"), assetPath)
        val stamp = apkStamp(context)
        val stampFile = File(target, STAMP_FILE)
        if (stampFile.isFile && stampFile.readText() == stamp) return target.path
        val partial = File(target.parentFile, "${target.name}.partial")
        partial.deleteRecursively()
        try {
            copyAssetFolder(context, assetPath, partial)
            File(partial, STAMP_FILE).writeText(stamp)
            target.deleteRecursively()
            if (!partial.renameTo(target)) throw IOException("cannot rename $partial to $target")
        } catch (e: IOException) {
            partial.deleteRecursively()
            throw TesseraException("copying the model assets/$assetPath to $target failed: ${e.message}", -2,
                "TESSERA_ERROR_IO")
        }
        return target.path
    }

    /** The installed APK's size and modification time: they change whenever the app (and its assets) does. */
    private fun apkStamp(context: Context): String {
        val apk = File(context.applicationInfo.sourceDir)
        return "${apk.length()} ${apk.lastModified()}"
    }

    private fun copyAssetFolder(context: Context, path: String, to: File) {
        val children = context.assets.list(path) ?: emptyArray()
        if (children.isEmpty()) throw IOException("assets/$path is missing or empty")
        if (!to.mkdirs() && !to.isDirectory) throw IOException("cannot make $to")
        for (child in children) {
            val assetPath = "$path/$child"
            val grandchildren = context.assets.list(assetPath) ?: emptyArray()
            if (grandchildren.isNotEmpty()) {
                copyAssetFolder(context, assetPath, File(to, child))
            } else {
                context.assets.open(assetPath).use { input ->
                    File(to, child).outputStream().use { output -> input.copyTo(output, 1 shl 20) }
                }
            }
        }
    }
}
