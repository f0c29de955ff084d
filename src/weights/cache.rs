//! The tensor cache of TVM and MLC on disk: `tensor-cache.json` (older trees call it
//! `ndarray-cache.json`), which lists `.bin` files beside it and the parameters each holds, and
//! the reading of one parameter's bytes from its file.
//!
//! The one idea: the metadata is checked whole when it is parsed (every record's dtype, its
//! size against its shape and encoding, its bytes inside its file as the file's record sizes
//! it), so a read can only fail on what the disk holds now, and every error names the
//! parameter and the file.
//!
//! The format is the one `tvm.contrib.tvmjs.dump_tensor_cache` writes: `{"records": [file,
//! ...]}`, each file `{"dataPath", "format": "raw-shard", "nbytes", "records": [param, ...]}`,
//! each parameter `{"name", "shape", "dtype", "format", "nbytes", "byteOffset"}` whose format
//! is `raw` (the bytes as they lie in memory) or `f32-to-bf16` (a float32 parameter stored as
//! the upper halves of its values, bfloat16; other dtypes stored raw).

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use serde_json::{Map, Value};

use crate::abi::{DLDataType, KDL_FLOAT};
use crate::object::tensor::{compact_nbytes, dtype_name, parse_dtype};
use crate::object::{Error, Result};

const F32: DLDataType = DLDataType::new(KDL_FLOAT, 32, 1);

/// How a parameter's bytes are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Encoding {
    Raw,
    /// float32 values stored as bfloat16 (their upper 16 bits).
    F32ToBf16,
}

/// One `.bin` file of the cache.
#[derive(Debug)]
struct DataFile {
    /// As the metadata names it (relative to the metadata's folder).
    data_path: String,
    /// Where it lies on this machine.
    path: PathBuf,
    nbytes: u64,
}

/// One parameter of the cache.
#[derive(Debug)]
pub(super) struct Param {
    pub name: String,
    pub shape: Vec<i64>,
    pub dtype: DLDataType,
    encoding: Encoding,
    /// Where its bytes lie: its file (an index into the cache's files), offset and length.
    file: usize,
    offset: u64,
    nbytes: usize,
}

/// A tensor cache: its files and its parameters, in the metadata's order.
#[derive(Debug)]
pub(super) struct TensorCache {
    /// The metadata's path, as the caller gave it.
    path: String,
    files: Vec<DataFile>,
    params: Vec<Param>,
    by_name: HashMap<String, usize>,
    /// The file read last, kept open for the next parameter (which mostly lies in it too).
    open: Mutex<Option<(usize, File)>>,
}

/// The field `key` of the JSON object `object`, read by `read`; errors say `what` it belongs to.
fn field<'a, T>(
    object: &'a Map<String, Value>,
    key: &str,
    what: &dyn Fn() -> String,
    expected: &str,
    read: impl FnOnce(&'a Value) -> Option<T>,
) -> Result<T> {
    let value = object
        .get(key)
        .ok_or_else(|| Error::value(format!("{}: no field `{key}`", what())))?;
    read(value).ok_or_else(|| {
        Error::value(format!(
            "{}: field `{key}` must be {expected}, got {value}",
            what()
        ))
    })
}

fn as_object<'a>(value: &'a Value, what: &dyn Fn() -> String) -> Result<&'a Map<String, Value>> {
    value
        .as_object()
        .ok_or_else(|| Error::value(format!("{}: expected a JSON object, got {value}", what())))
}

/// A JSON array of non-negative integers, as a shape.
pub(super) fn shape_of(value: &Value) -> Option<Vec<i64>> {
    value
        .as_array()?
        .iter()
        .map(|d| d.as_i64().filter(|&d| d >= 0))
        .collect()
}

impl TensorCache {
    /// The cache whose metadata `text` was read from `path`; its files lie beside `path`.
    ///
    /// Errors: `ValueError` naming the file, and the parameter where one is at fault, for text
    /// that is not such metadata.
    pub fn parse(path: &str, text: &str) -> Result<TensorCache> {
        let at = |what: String| format!("tensor cache `{path}`: {what}");
        let json: Value = serde_json::from_str(text)
            .map_err(|e| Error::value(at(format!("not valid JSON ({e})"))))?;
        let top = as_object(&json, &|| at("the metadata".into()))?;
        let files = field(
            top,
            "records",
            &|| at("the metadata".into()),
            "an array",
            Value::as_array,
        )?;
        let folder = Path::new(path).parent().unwrap_or(Path::new(""));
        let mut cache = TensorCache {
            path: path.to_string(),
            files: Vec::with_capacity(files.len()),
            params: Vec::new(),
            by_name: HashMap::new(),
            open: Mutex::new(None),
        };
        for (i, file) in files.iter().enumerate() {
            cache.parse_file(i, file, folder)?;
        }
        Ok(cache)
    }

    fn parse_file(&mut self, index: usize, file: &Value, folder: &Path) -> Result<()> {
        let path = &self.path;
        let what = || format!("tensor cache `{path}`: file record {index}");
        let file = as_object(file, &what)?;
        let data_path = field(file, "dataPath", &what, "a string", Value::as_str)?.to_string();
        let what = || format!("tensor cache `{path}`: file `{data_path}`");
        let format = field(file, "format", &what, "a string", Value::as_str)?;
        if format != "raw-shard" {
            return Err(Error::value(format!(
                "{}: format `{format}` is not one this loader reads (`raw-shard`)",
                what()
            )));
        }
        let nbytes = field(file, "nbytes", &what, "a byte count", Value::as_u64)?;
        let params = field(file, "records", &what, "an array", Value::as_array)?;
        let file_index = self.files.len();
        for param in params {
            let param = self.parse_param(param, &data_path, file_index, nbytes)?;
            if self
                .by_name
                .insert(param.name.clone(), self.params.len())
                .is_some()
            {
                return Err(Error::value(format!(
                    "{}: parameter `{}` is listed twice",
                    what(),
                    param.name
                )));
            }
            self.params.push(param);
        }
        self.files.push(DataFile {
            path: folder.join(&data_path),
            data_path,
            nbytes,
        });
        Ok(())
    }

    fn parse_param(
        &self,
        param: &Value,
        data_path: &str,
        file: usize,
        file_nbytes: u64,
    ) -> Result<Param> {
        let path = &self.path;
        let what = || format!("tensor cache `{path}`: a record of file `{data_path}`");
        let param = as_object(param, &what)?;
        let name = field(param, "name", &what, "a string", Value::as_str)?;
        let what = || format!("tensor cache `{path}`: parameter `{name}` (file `{data_path}`)");
        let shape = field(param, "shape", &what, "an array of sizes", shape_of)?;
        let dtype = field(param, "dtype", &what, "a string", Value::as_str)?;
        let dtype = parse_dtype(dtype).map_err(|e| e.context(what()))?;
        let encoding = match field(param, "format", &what, "a string", Value::as_str)? {
            "raw" => Encoding::Raw,
            "f32-to-bf16" => Encoding::F32ToBf16,
            other => {
                return Err(Error::value(format!(
                    "{}: format `{other}` is not one this loader reads (`raw`, `f32-to-bf16`)",
                    what()
                )));
            }
        };
        let nbytes = field(param, "nbytes", &what, "a byte count", Value::as_u64)?;
        let offset = field(param, "byteOffset", &what, "a byte offset", Value::as_u64)?;
        let in_memory = compact_nbytes(&shape, dtype).map_err(|e| e.context(what()))?;
        let stored = match encoding {
            Encoding::F32ToBf16 if dtype == F32 => in_memory / 2,
            _ => in_memory,
        };
        if nbytes != stored as u64 {
            return Err(Error::value(format!(
                "{}: {nbytes} bytes do not hold shape {shape:?} of {} stored `{}` ({stored} \
                 bytes)",
                what(),
                dtype_name(dtype),
                if encoding == Encoding::Raw {
                    "raw"
                } else {
                    "f32-to-bf16"
                }
            )));
        }
        if offset
            .checked_add(nbytes)
            .is_none_or(|end| end > file_nbytes)
        {
            return Err(Error::value(format!(
                "{}: bytes {offset}..{} lie past the end of the file ({file_nbytes} bytes)",
                what(),
                offset.saturating_add(nbytes)
            )));
        }
        Ok(Param {
            name: name.to_string(),
            shape,
            dtype,
            encoding,
            file,
            offset,
            nbytes: stored,
        })
    }

    /// The metadata's path, as the caller gave it.
    pub fn path(&self) -> &str {
        &self.path
    }

    pub fn params(&self) -> &[Param] {
        &self.params
    }

    /// The index of the parameter named `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }

    /// The name of the file parameter `param` lies in, as the metadata names it.
    pub fn file_of(&self, param: &Param) -> &str {
        &self.files[param.file].data_path
    }

    /// The bytes of parameter `index` as they lie in memory (decoded), read from its file now.
    ///
    /// Errors: `RuntimeError` naming the parameter and the file when the file cannot be opened
    /// or read, or is not as long as the metadata says (truncated, or written since).
    pub fn read(&self, index: usize) -> Result<Vec<u8>> {
        let param = &self.params[index];
        let data = &self.files[param.file];
        let failed = |why: String| {
            Error::runtime(format!(
                "cannot read parameter `{}` from `{}` (tensor cache `{}`): {why}",
                param.name,
                data.path.display(),
                self.path
            ))
        };
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if open.as_ref().is_none_or(|(at, _)| *at != param.file) {
            *open = None;
            let file = File::open(&data.path).map_err(|e| failed(e.to_string()))?;
            *open = Some((param.file, file));
        }
        let (_, file) = open.as_ref().expect("opened above");
        let length = file.metadata().map_err(|e| failed(e.to_string()))?.len();
        if length != data.nbytes {
            return Err(failed(format!(
                "the file holds {length} bytes, but the metadata says {} (truncated, or \
                 written since?)",
                data.nbytes
            )));
        }
        let mut stored = vec![0u8; param.nbytes];
        file.read_exact_at(&mut stored, param.offset)
            .map_err(|e| failed(e.to_string()))?;
        Ok(match param.encoding {
            Encoding::F32ToBf16 if param.dtype == F32 => bf16_to_f32_bytes(&stored),
            _ => stored,
        })
    }
}

/// float32 values, in native byte order, from the bfloat16 values `stored` holds (each one a
/// float32's upper 16 bits, little-endian, as `tvmjs` writes them).
fn bf16_to_f32_bytes(stored: &[u8]) -> Vec<u8> {
    stored
        .chunks_exact(2)
        .flat_map(|half| {
            let bits = u32::from(u16::from_le_bytes([half[0], half[1]])) << 16;
            f32::from_bits(bits).to_ne_bytes()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache_json(file_nbytes: u64, param: &str) -> String {
        format!(
            r#"{{"metadata": {{}}, "records": [{{"dataPath": "params_shard_0.bin",
               "format": "raw-shard", "nbytes": {file_nbytes}, "records": [{param}]}}]}}"#
        )
    }

    fn error(text: &str) -> String {
        TensorCache::parse("/w/tensor-cache.json", text)
            .unwrap_err()
            .message
    }

    #[test]
    fn metadata_parses_into_files_and_params_in_order() {
        let param = r#"{"name": "w", "shape": [2, 3], "dtype": "float32", "format": "f32-to-bf16",
                        "nbytes": 12, "byteOffset": 4}"#;
        let cache = TensorCache::parse("/w/tensor-cache.json", &cache_json(16, param)).unwrap();
        let w = &cache.params()[0];
        assert_eq!((w.name.as_str(), &w.shape[..]), ("w", &[2, 3][..]));
        assert_eq!(w.encoding, Encoding::F32ToBf16);
        assert_eq!(cache.index_of("w"), Some(0));
        assert_eq!(cache.file_of(w), "params_shard_0.bin");
        assert_eq!(cache.files[0].path, PathBuf::from("/w/params_shard_0.bin"));
    }

    #[test]
    fn bad_metadata_is_a_value_error_naming_the_file_and_parameter() {
        let p = |fields: &str| cache_json(64, &format!(r#"{{"name": "w", {fields}}}"#));
        let table = [
            ("{", "not valid JSON".to_string()),
            ("[]", "expected a JSON object".to_string()),
            ("{}", "the metadata: no field `records`".to_string()),
            (
                &p(
                    r#""shape": [4], "dtype": "float33", "format": "raw", "nbytes": 16, "byteOffset": 0"#,
                ),
                "parameter `w` (file `params_shard_0.bin`): `float33` names no dtype".to_string(),
            ),
            (
                &p(
                    r#""shape": [4], "dtype": "float32", "format": "raw", "nbytes": 12, "byteOffset": 0"#,
                ),
                "12 bytes do not hold shape [4] of float32 stored `raw` (16 bytes)".to_string(),
            ),
            (
                &p(
                    r#""shape": [4], "dtype": "float32", "format": "raw", "nbytes": 16, "byteOffset": 60"#,
                ),
                "bytes 60..76 lie past the end of the file (64 bytes)".to_string(),
            ),
            (
                &p(
                    r#""shape": [-4], "dtype": "float32", "format": "raw", "nbytes": 16, "byteOffset": 0"#,
                ),
                "field `shape` must be an array of sizes, got [-4]".to_string(),
            ),
            (
                &p(
                    r#""shape": [4], "dtype": "float32", "format": "zip", "nbytes": 16, "byteOffset": 0"#,
                ),
                "format `zip` is not one this loader reads".to_string(),
            ),
        ];
        for (text, expected) in table {
            let message = error(text);
            assert!(
                message.starts_with("tensor cache `/w/tensor-cache.json`"),
                "{message}"
            );
            assert!(message.contains(&expected), "{message}\nlacks: {expected}");
        }
        let twice = r#"{"name": "w", "shape": [], "dtype": "int8", "format": "raw", "nbytes": 1,
                        "byteOffset": 0}"#;
        let message = error(&cache_json(1, &format!("{twice}, {twice}")));
        assert!(
            message.contains("parameter `w` is listed twice"),
            "{message}"
        );
    }

    #[test]
    fn bfloat16_halves_widen_to_the_float32_values_they_cut() {
        let values = [1.0f32, -2.5, 0.0, 3.0e38];
        let stored: Vec<u8> = values
            .iter()
            .flat_map(|v| ((v.to_bits() >> 16) as u16).to_le_bytes())
            .collect();
        let widened = bf16_to_f32_bytes(&stored);
        let back: Vec<f32> = widened
            .chunks_exact(4)
            .map(|b| f32::from_ne_bytes(b.try_into().unwrap()))
            .collect();
        assert_eq!(back[..3], values[..3]);
        assert_eq!(back[3].to_bits(), values[3].to_bits() & 0xffff_0000);
    }
}
