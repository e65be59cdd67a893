-- Headless Neovim asks specd for a completion and writes the answer as JSON.
-- Environment: SPECD_NVIM_CMD (JSON list: the server command), SPECD_NVIM_FILE (the file to edit),
-- SPECD_NVIM_OUT (where to write), SPECD_NVIM_LINE / SPECD_NVIM_COL (cursor, 1-based line, 0-based byte col).
local out = os.getenv("SPECD_NVIM_OUT")

local function write(value)
  local f = assert(io.open(out, "w"))
  f:write(vim.fn.json_encode(value))
  f:close()
end

local function run()
  local cmd = vim.fn.json_decode(os.getenv("SPECD_NVIM_CMD"))
  local file = os.getenv("SPECD_NVIM_FILE")
  vim.cmd("edit " .. vim.fn.fnameescape(file))
  local buf = vim.api.nvim_get_current_buf()
  local ready = false
  local config = {
    name = "specd", cmd = cmd, root_dir = vim.fn.fnamemodify(file, ":h"),
    on_init = function() ready = true end,
  }
  local id
  if vim.lsp.start then  -- Neovim 0.8+
    id = vim.lsp.start(config)
  else                   -- Neovim 0.7 (Debian 12)
    id = vim.lsp.start_client(config)
    vim.lsp.buf_attach_client(buf, id)
  end
  if not vim.wait(180000, function() return ready end, 50) then
    return { error = "the server did not initialize" }
  end
  vim.wait(500, function() return false end, 50)  -- let didOpen go out
  vim.o.virtualedit = "onemore"  -- the cursor may sit after the last character, as in insert mode
  vim.api.nvim_win_set_cursor(0, { tonumber(os.getenv("SPECD_NVIM_LINE")), tonumber(os.getenv("SPECD_NVIM_COL")) })
  local params = vim.lsp.util.make_position_params()
  local responses, err = vim.lsp.buf_request_sync(buf, "textDocument/completion", params, 180000)
  if not responses then
    return { error = tostring(err) }
  end
  local results = {}
  for _, r in pairs(responses) do
    table.insert(results, { result = r.result, err = r.err and tostring(r.err.message or r.err) or vim.NIL })
  end
  return { version = tostring(vim.version().major) .. "." .. tostring(vim.version().minor), responses = results }
end

local ok, value = pcall(run)
write(ok and value or { error = tostring(value) })
vim.cmd("qa!")
