package ai.tessera

import java.io.File

/**
 * The parameters of each function of an executable, read from its executable.json (docs/format.md:
 * functions.<name>.params, each with a name, struct info and a state flag). tessera.h calls a function
 * with positional arguments and has no call that lists them, so Module reads the names here to map
 * run()'s named inputs onto positions. State parameters (a KV cache) are not passed: the runtime keeps them.
 */
internal class ExecutableSignature private constructor(val functions: Map<String, List<Parameter>>) {
    /** [kind] is the struct info's kind: "tensor", "prim" (an integer), "tuple", "shape", "object". */
    data class Parameter(val name: String, val kind: String)

    companion object {
        fun read(modelDir: String): ExecutableSignature {
            val file = File(modelDir, "executable.json")
            val root = try {
                JsonReader(file.readText(Charsets.UTF_8)).readDocument()
            } catch (e: java.io.IOException) {
                throw TesseraException("cannot read ${file.path}: ${e.message}", -2, "TESSERA_ERROR_IO")
            } catch (e: IllegalArgumentException) {
                throw format(file, e.message ?: "bad JSON")
            }
            val functions = ((root as? Map<*, *>)?.get("functions") as? Map<*, *>)
                ?: throw format(file, "it has no \"functions\" object")
            val result = LinkedHashMap<String, List<Parameter>>()
            for ((name, function) in functions) {
                val params = (function as? Map<*, *>)?.get("params") as? List<*>
                    ?: throw format(file, "function $name has no \"params\" list")
                result[name as String] = params.mapNotNull { p ->
                    val param = p as? Map<*, *> ?: throw format(file, "a parameter of $name is not an object")
                    if (param["state"] == true) return@mapNotNull null
                    val kind = (param["sinfo"] as? Map<*, *>)?.get("kind") as? String ?: "tensor"
                    Parameter(param["name"] as? String ?: throw format(file, "a parameter of $name has no name"), kind)
                }
            }
            return ExecutableSignature(result)
        }

        private fun format(file: File, why: String) =
            TesseraException("${file.path} is not a readable executable: $why", -3, "TESSERA_ERROR_FORMAT")
    }
}

/**
 * A small JSON reader (RFC 8259) into Map, List, String, Double, Boolean and null: the JVM has none built
 * in, and the plain-JVM host build takes no dependency besides kotlinx-coroutines. Malformed input throws
 * IllegalArgumentException with the offset.
 */
internal class JsonReader(private val text: String) {
    private var at = 0

    fun readDocument(): Any? {
        val value = readValue()
        skipSpace()
        if (at != text.length) fail("text after the JSON value")
        return value
    }

    private fun readValue(): Any? {
        skipSpace()
        if (at >= text.length) fail("the text ends where a value should be")
        return when (text[at]) {
            '{' -> readObject()
            '[' -> readArray()
            '"' -> readString()
            't' -> literal("true", true)
            'f' -> literal("false", false)
            'n' -> literal("null", null)
            else -> readNumber()
        }
    }

    private fun readObject(): Map<String, Any?> {
        val result = LinkedHashMap<String, Any?>()
        at++
        skipSpace()
        if (peek() == '}') return result.also { at++ }
        while (true) {
            skipSpace()
            if (peek() != '"') fail("an object key should be a string")
            val key = readString()
            skipSpace()
            expect(':')
            result[key] = readValue()
            skipSpace()
            if (peek() == ',') at++ else return result.also { expect('}') }
        }
    }

    private fun readArray(): List<Any?> {
        val result = ArrayList<Any?>()
        at++
        skipSpace()
        if (peek() == ']') return result.also { at++ }
        while (true) {
            result.add(readValue())
            skipSpace()
            if (peek() == ',') at++ else return result.also { expect(']') }
        }
    }

    private fun readString(): String {
        at++
        val out = StringBuilder()
        while (true) {
            if (at >= text.length) fail("a string is not closed")
            val c = text[at++]
            when {
                c == '"' -> return out.toString()
                c != '\\' -> out.append(c)
                else -> {
                    if (at >= text.length) fail("a string ends in an escape")
                    when (val e = text[at++]) {
                        '"', '\\', '/' -> out.append(e)
                        'b' -> out.append('\b')
                        'f' -> out.append('\u000C')
                        'n' -> out.append('\n')
                        'r' -> out.append('\r')
                        't' -> out.append('\t')
                        'u' -> {
                            if (at + 4 > text.length) fail("a \\u escape is cut short")
                            out.append(text.substring(at, at + 4).toIntOrNull(16)?.toChar() ?: fail("a bad \\u escape"))
                            at += 4
                        }
                        else -> fail("an unknown escape \\$e")
                    }
                }
            }
        }
    }

    private fun readNumber(): Double {
        val start = at
        while (at < text.length && text[at] in "+-0123456789.eE") at++
        return text.substring(start, at).toDoubleOrNull() ?: fail("a bad value")
    }

    private fun literal(word: String, value: Any?): Any? {
        if (!text.startsWith(word, at)) fail("a bad value")
        at += word.length
        return value
    }

    private fun skipSpace() {
        while (at < text.length && (text[at] == ' ' || text[at] == '\n' || text[at] == '\r' || text[at] == '\t')) at++
    }

    private fun peek(): Char = if (at < text.length) text[at] else '\u0000'

    private fun expect(c: Char) {
        if (peek() != c) fail("expected '$c'")
        at++
    }

    private fun fail(why: String): Nothing = throw IllegalArgumentException("$why at offset $at")
}
