package ai.tessera

import android.app.ActivityManager
import android.content.Context

/**
 * The phone's memory as Android reports it (ActivityManager.MemoryInfo), beside what a model needs
 * (Engine.memory): an app can choose a smaller model before loading one that will not fit. The runtime
 * also refuses, with a TesseraException, to load a model larger than the memory available.
 */
data class DeviceMemoryInfo(val availableBytes: Long, val totalBytes: Long, val lowMemory: Boolean) {
    /** Whether [plan] fits in what is available now. */
    fun fits(plan: MemoryPlan): Boolean = plan.total <= availableBytes

    companion object {
        @JvmStatic
        fun of(context: Context): DeviceMemoryInfo {
            val manager = context.getSystemService(Context.ACTIVITY_SERVICE) as ActivityManager
            val info = ActivityManager.MemoryInfo()
            manager.getMemoryInfo(info)
            return DeviceMemoryInfo(info.availMem, info.totalMem, info.lowMemory)
        }
    }
}
